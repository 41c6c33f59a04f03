// Datasets as placement and the rank environment see them: their names, the
// sizes the config writes, and the time to stage one to a site.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "federation/placement.h"

namespace fedgate::federation {

// 1 to 100 of [A-Za-z0-9._-], starting with a letter or digit: never empty,
// never holding '/', never "." or "..", so it is safe as a file name.
bool IsValidDatasetName(std::string_view name);

// "FEDGATE_DATASET_DIR_" + the name upper-cased, every character outside
// A-Z0-9 made '_' ("imagenet-1k" -> FEDGATE_DATASET_DIR_IMAGENET_1K).
std::string DatasetEnvName(std::string_view name);

// "2TB", "500GiB", "64MiB", "1048576" (bytes); decimal units are powers of
// 1000, binary ones of 1024. nullopt for anything else or on overflow.
std::optional<uint64_t> ParseByteSize(std::string_view text);

// "1.2 TB", "640 MB", "17 KB" (decimal, one decimal place at most).
std::string HumanBytes(uint64_t bytes);

// Seconds to move `bytes` over a link of `gbps` (0 when nothing is moved;
// infinity when bytes are to move over no link).
double StagingSeconds(uint64_t bytes, double gbps);

// What one site would have to stage for a job: the datasets it lacks, each
// pulled from its fastest holder.
struct SiteStaging {
  double seconds = 0;   // the datasets one after another
  uint64_t bytes = 0;
  std::string detail;   // "1.2 TB to stage from cn-beijing at 9.6 Gbit/s, ~17 min"
};

// For every offer, by position. A holder is an up offer that holds the
// dataset; the link from a holder is the measured pair (either direction as
// `links` gives it); a site with no measured link to any holder is ranked as
// if over the slowest measured link from a holder (1 Gbit/s when none is
// measured). `*missing` names the first dataset no up site holds ("" when
// all are held); then every site lacking it stages forever.
std::vector<SiteStaging> StagingPerOffer(const std::vector<std::string>& datasets,
                                         const std::vector<SiteOffer>& offers,
                                         const OfferPairGbps& links, std::string* missing);

// "~17 min", "~40 s", "~2.5 h".
std::string HumanSeconds(double seconds);

}  // namespace fedgate::federation
