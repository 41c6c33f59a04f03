#include "federation/dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/number.h"
#include "base/str_cat.h"

namespace fedgate::federation {

bool IsValidDatasetName(std::string_view name) {
  if (name.empty() || name.size() > 100) return false;
  if (!std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

std::string DatasetEnvName(std::string_view name) {
  std::string out = "FEDGATE_DATASET_DIR_";
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(std::toupper(static_cast<unsigned char>(c)));
    out.push_back((std::isupper(u) || std::isdigit(u)) ? static_cast<char>(u) : '_');
  }
  return out;
}

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const auto n = ParseNumber<uint64_t>(text.substr(0, digits));
  if (!n) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},          {"B", 1},
      {"KB", 1000ULL},  {"MB", 1000ULL * 1000},  {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
      {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30}, {"TiB", 1ULL << 40}};
  for (const auto& u : kUnits) {
    if (unit != u.name) continue;
    if (*n > std::numeric_limits<uint64_t>::max() / u.factor) return std::nullopt;
    return *n * u.factor;
  }
  return std::nullopt;
}

namespace {

std::string HumanGbps(double g) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), g >= 10 ? "%.0f" : g >= 1 ? "%.1f" : "%.2f", g);
  return buf;
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[32];
  if (i == 0 || v >= 100) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kNames[i]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kNames[i]);
  }
  return buf;
}

double StagingSeconds(uint64_t bytes, double gbps) {
  if (bytes == 0) return 0;
  if (gbps <= 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(bytes) * 8 / (gbps * 1e9);
}

}  // namespace fedgate::federation

namespace fedgate::federation {

std::string HumanSeconds(double s) {
  char buf[32];
  if (s < 90) {
    std::snprintf(buf, sizeof(buf), "~%.0f s", std::max(1.0, s));
  } else if (s < 5400) {
    std::snprintf(buf, sizeof(buf), "~%.0f min", s / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "~%.1f h", s / 3600);
  }
  return buf;
}

std::vector<SiteStaging> StagingPerOffer(const std::vector<std::string>& datasets,
                                         const std::vector<SiteOffer>& offers,
                                         const OfferPairGbps& links, std::string* missing) {
  missing->clear();
  std::vector<SiteStaging> out(offers.size());
  for (const auto& name : datasets) {
    std::vector<size_t> holders;
    uint64_t bytes = 0;
    for (size_t i = 0; i < offers.size(); ++i) {
      auto it = offers[i].datasets.find(name);
      if (it == offers[i].datasets.end() || !offers[i].up) continue;
      holders.push_back(i);
      bytes = std::max(bytes, it->second);
    }
    if (holders.empty()) {
      if (missing->empty()) *missing = name;
      for (size_t i = 0; i < offers.size(); ++i) {
        if (offers[i].datasets.contains(name)) continue;
        out[i].seconds = std::numeric_limits<double>::infinity();
        out[i].detail += StrCat(out[i].detail.empty() ? "" : "; ", "no site up holds ", name);
      }
      continue;
    }
    // The slowest measured link from a holder stands for unmeasured ones.
    double slowest = std::numeric_limits<double>::infinity();
    for (size_t h : holders) {
      for (size_t i = 0; i < offers.size(); ++i) {
        if (i == h) continue;
        if (auto g = links(h, i); g && *g > 0) slowest = std::min(slowest, *g);
      }
    }
    const bool any_measured = std::isfinite(slowest);
    if (!any_measured) slowest = 1.0;
    for (size_t i = 0; i < offers.size(); ++i) {
      if (offers[i].datasets.contains(name)) continue;
      double best = 0;
      size_t from = holders.front();
      for (size_t h : holders) {
        if (auto g = links(h, i); g && *g > best) {
          best = *g;
          from = h;
        }
      }
      const bool assumed = best <= 0;
      if (assumed) best = slowest;
      const double secs = StagingSeconds(bytes, best);
      out[i].seconds += secs;
      out[i].bytes += bytes;
      out[i].detail += StrCat(
          out[i].detail.empty() ? "" : "; ", HumanBytes(bytes), " of ", name, " to stage from ",
          offers[from].site, " at ", HumanGbps(best), " Gbit/s",
          assumed ? (any_measured ? " (link not measured: the slowest measured)"
                                  : " (no link measured: 1 Gbit/s assumed)")
                  : "",
          ", ", HumanSeconds(secs));
    }
  }
  return out;
}

}  // namespace fedgate::federation
