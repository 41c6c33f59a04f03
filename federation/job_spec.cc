#include "federation/job_spec.h"

#include <algorithm>
#include <cmath>

#include "federation/dataset.h"
#include "federation/duration.h"
#include "federation/mig.h"
#include "federation/names.h"
#include "federation/service_spec.h"
#include "base/str_cat.h"

namespace fedgate::federation {

absl::Status ValidateJobSpec(const v1::JobSpec& spec, const std::set<std::string>& known_models) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(StrCat(parts...)); };
  if (spec.gpus() == 0 && spec.mig().empty()) return bad("gpus must be > 0");
  if (!spec.mig().empty() && !IsMigProfile(spec.mig())) {
    return bad("mig must be a MIG profile such as 1g.10gb, got \"", spec.mig().substr(0, 20), "\"");
  }
  if (spec.gpus() > 100000) return bad("gpus must be at most 100000, got ", spec.gpus());
  for (const auto& m : spec.gpu_models()) {
    if (m.empty()) return bad("gpu_models: empty model name");
    if (!known_models.empty() && !known_models.contains(m)) {
      std::string known;
      for (const auto& k : known_models) known += (known.empty() ? "" : ", ") + k;
      return bad("unknown gpu model \"", m, "\" (the federation has: ", known, ")");
    }
  }
  if (!std::isfinite(spec.min_link_gbps()) || spec.min_link_gbps() < 0) {
    return bad("min_link_gbps must be >= 0, got ", spec.min_link_gbps());
  }
  if (spec.min_gpus_per_site() > spec.gpus()) {
    return bad("min_gpus_per_site ", spec.min_gpus_per_site(), " is more than gpus ", spec.gpus());
  }
  for (const auto* list : {&spec.allowed_sites(), &spec.avoided_sites(), &spec.preferred_sites()}) {
    for (const auto& s : *list) {
      if (!IsValidName(s)) {
        return bad("invalid site name \"", s.substr(0, 63),
                   "\" in allowed/avoided/preferred_sites");
      }
    }
  }
  if (spec.datasets_size() > 32) return bad("at most 32 datasets, got ", spec.datasets_size());
  std::set<std::string> seen_datasets;
  for (const auto& d : spec.datasets()) {
    if (!IsValidDatasetName(d)) {
      return bad("datasets: \"", d.substr(0, 100),
                 "\" is not a dataset name (want 1-100 of [A-Za-z0-9._-], starting with a letter "
                 "or digit; no '/', no '..')");
    }
    if (!seen_datasets.insert(d).second) return bad("datasets: \"", d, "\" is named twice");
  }
  if (!spec.priority().empty() && spec.priority() != "guaranteed" && spec.priority() != "spot") {
    return bad("priority must be guaranteed or spot, got \"", spec.priority(), "\"");
  }
  if (!spec.estimated_duration().empty()) {
    auto d = ParseDurationMs(spec.estimated_duration());
    if (!d.ok()) return bad("estimated_duration: ", d.status().message());
    if (*d <= 0) return bad("estimated_duration must be > 0");
  }
  if (!spec.time_limit().empty()) {
    auto d = ParseDurationMs(spec.time_limit());
    if (!d.ok()) return bad("time_limit: ", d.status().message());
    if (*d <= 0) return bad("time_limit must be > 0");
  }
  if (!spec.recovery().empty() && spec.recovery() != "restart" && spec.recovery() != "replace") {
    return bad("recovery must be restart or replace, got \"", spec.recovery(), "\"");
  }
  if (spec.has_max_replacements() && spec.max_replacements() > 1000) {
    return bad("max_replacements must be at most 1000, got ", spec.max_replacements());
  }
  if (spec.has_checkpoint() && spec.checkpoint().keep() > 100) {
    return bad("checkpoint.keep must be at most 100, got ", spec.checkpoint().keep());
  }
  if (spec.command().empty() || spec.command(0).empty()) return bad("command is required");
  // An image reference: no spaces or control characters, at most 512 bytes.
  if (spec.image().size() > 512 ||
      std::any_of(spec.image().begin(), spec.image().end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    return bad("image must be an image reference (no spaces), got \"", spec.image().substr(0, 64), "\"");
  }
  for (const auto& [k, v] : spec.env()) {
    if (k.empty() || k.find('=') != std::string::npos) return bad("env: invalid name \"", k, "\"");
  }
  return ValidateServiceFields(spec);
}

v1::JobSpec WithDefaults(v1::JobSpec spec) {
  if (spec.gpus() == 0 && !spec.mig().empty()) spec.set_gpus(1);  // one slice
  if (spec.priority().empty()) spec.set_priority("guaranteed");
  if (spec.estimated_duration().empty()) spec.set_estimated_duration("1h");
  if (spec.max_attempts() == 0) spec.set_max_attempts(3);
  if (spec.min_gpus_per_site() == 0) spec.set_min_gpus_per_site(1);
  if (spec.recovery().empty()) spec.set_recovery("restart");
  if (!spec.has_max_replacements()) spec.set_max_replacements(3);
  if (spec.has_checkpoint() && spec.checkpoint().keep() == 0) spec.mutable_checkpoint()->set_keep(2);
  return WithServiceDefaults(std::move(spec));
}

JobRequest ToJobRequest(const v1::JobSpec& spec) {
  JobRequest r;
  r.gpus = spec.gpus() == 0 && !spec.mig().empty() ? 1 : spec.gpus();
  r.mig_profile = spec.mig();
  r.gpu_models.assign(spec.gpu_models().begin(), spec.gpu_models().end());
  r.min_gpu_memory_gib = spec.min_gpu_memory_gib();
  r.max_sites = spec.max_sites();
  r.min_gpus_per_site = std::max<uint32_t>(1, spec.min_gpus_per_site());
  r.min_link_gbps = spec.min_link_gbps();
  r.allowed_sites.assign(spec.allowed_sites().begin(), spec.allowed_sites().end());
  r.avoided_sites.assign(spec.avoided_sites().begin(), spec.avoided_sites().end());
  r.preferred_sites.assign(spec.preferred_sites().begin(), spec.preferred_sites().end());
  r.datasets.assign(spec.datasets().begin(), spec.datasets().end());
  return r;
}

}  // namespace fedgate::federation
