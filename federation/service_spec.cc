#include "federation/service_spec.h"

#include <cctype>
#include <cmath>

#include "base/str_cat.h"
#include "federation/duration.h"

namespace fedgate::federation {
namespace {

absl::Status Bad(auto&&... parts) { return absl::InvalidArgumentError(StrCat(parts...)); }

int64_t Ms(const std::string& text, int64_t fallback) {
  auto d = ParseDurationMs(text);
  return d.ok() ? *d : fallback;
}

// A duration field: empty (the default) or a positive duration.
absl::Status CheckDuration(const std::string& field, const std::string& text) {
  if (text.empty()) return absl::OkStatus();
  auto d = ParseDurationMs(text);
  if (!d.ok()) return Bad(field, ": ", d.status().message());
  if (*d <= 0) return Bad(field, " must be > 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseSizeBytes(std::string_view text) {
  size_t i = 0;
  uint64_t n = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (n > (1ull << 50)) return absl::InvalidArgumentError(StrCat("size \"", text, "\" too large"));
    n = n * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0) {
    return absl::InvalidArgumentError(StrCat("size \"", text.substr(0, 40),
                                             "\" must be a whole number with an optional unit (64MiB)"));
  }
  const std::string_view unit = text.substr(i);
  struct U { std::string_view name; uint64_t mult; };
  static constexpr U kUnits[] = {{"", 1},           {"B", 1},           {"KiB", 1ull << 10},
                                 {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"kB", 1000},
                                 {"MB", 1000000},   {"GB", 1000000000}};
  for (const auto& u : kUnits) {
    if (unit == u.name) return n * u.mult;
  }
  return absl::InvalidArgumentError(
      StrCat("size \"", text.substr(0, 40), "\": unknown unit \"", unit.substr(0, 10),
             "\" (want B, KiB, MiB, GiB, kB, MB or GB)"));
}

absl::Status ValidateServiceFields(const v1::JobSpec& spec) {
  if (!spec.kind().empty() && spec.kind() != "job" && spec.kind() != "service") {
    return Bad("kind must be job or service, got \"", spec.kind().substr(0, 40), "\"");
  }
  if (!IsService(spec)) {
    if (spec.has_replicas() || spec.has_readiness() || spec.has_autoscale() ||
        spec.spot_replicas() != 0 || spec.has_idempotent() || !spec.request_timeout().empty() ||
        !spec.max_body().empty()) {
      return Bad("replicas, readiness, autoscale, spot_replicas, idempotent, request_timeout "
                 "and max_body are for kind: service");
    }
    return absl::OkStatus();
  }
  if (spec.gpus() != 1 && !(spec.gpus() == 0 && !spec.mig().empty())) {
    return Bad("a service's gpus is per replica and must be 1 (a replica is one rank), got ",
               spec.gpus());
  }
  if (!spec.service().empty()) return Bad("service is set by the coordinator on replicas");
  const auto& r = spec.replicas();
  const uint32_t min = spec.has_replicas() && r.min() > 0 ? r.min() : 1;
  const uint32_t max = spec.has_replicas() && r.max() > 0 ? r.max() : min;
  if (spec.has_replicas() && r.min() == 0 && r.max() == 0) return Bad("replicas.min must be >= 1");
  if (max > kMaxReplicas) return Bad("replicas.max ", max, " is over the limit of ", kMaxReplicas);
  if (max < min) return Bad("replicas.max ", max, " is less than replicas.min ", min);
  if (r.desired() != 0 && (r.desired() < min || r.desired() > max)) {
    return Bad("replicas.desired ", r.desired(), " is outside [", min, ", ", max, "]");
  }
  const auto& p = spec.readiness();
  if (!p.path().empty() && (p.path()[0] != '/' || p.path().size() > 256 ||
                            p.path().find_first_of(" \r\n\t") != std::string::npos)) {
    return Bad("readiness.path must start with / (at most 256 characters, no spaces), got \"",
               p.path().substr(0, 40), "\"");
  }
  if (auto st = CheckDuration("readiness.period", p.period()); !st.ok()) return st;
  if (auto st = CheckDuration("readiness.timeout", p.timeout()); !st.ok()) return st;
  if (p.failure_threshold() > 100) return Bad("readiness.failure_threshold must be at most 100");
  if (spec.has_autoscale()) {
    const auto& a = spec.autoscale();
    if (!std::isfinite(a.target_rps_per_replica()) || a.target_rps_per_replica() <= 0) {
      return Bad("autoscale.target_rps_per_replica must be > 0");
    }
    for (const auto& [field, text] :
         {std::pair{"autoscale.scale_up_after", a.scale_up_after()},
          {"autoscale.scale_down_after", a.scale_down_after()},
          {"autoscale.window", a.window()},
          {"autoscale.interval", a.interval()}}) {
      if (auto st = CheckDuration(field, text); !st.ok()) return st;
    }
  }
  if (!std::isfinite(spec.spot_replicas()) || spec.spot_replicas() < 0 || spec.spot_replicas() > 1) {
    return Bad("spot_replicas must be a share between 0 and 1, got ", spec.spot_replicas());
  }
  if (auto st = CheckDuration("request_timeout", spec.request_timeout()); !st.ok()) return st;
  if (!spec.max_body().empty()) {
    auto b = ParseSizeBytes(spec.max_body());
    if (!b.ok()) return Bad("max_body: ", b.status().message());
    if (*b == 0 || *b > (64ull << 30)) return Bad("max_body must be between 1 byte and 64GiB");
  }
  return absl::OkStatus();
}

v1::JobSpec WithServiceDefaults(v1::JobSpec spec) {
  if (!IsService(spec)) return spec;
  auto* r = spec.mutable_replicas();
  if (r->min() == 0) r->set_min(1);
  if (r->max() == 0) r->set_max(r->min());
  if (r->desired() == 0) r->set_desired(r->min());
  auto* p = spec.mutable_readiness();
  if (p->path().empty()) p->set_path("/healthz");
  if (p->period().empty()) p->set_period("2s");
  if (p->timeout().empty()) p->set_timeout("1s");
  if (p->failure_threshold() == 0) p->set_failure_threshold(3);
  if (spec.has_autoscale()) {
    auto* a = spec.mutable_autoscale();
    if (a->scale_up_after().empty()) a->set_scale_up_after("15s");
    if (a->scale_down_after().empty()) a->set_scale_down_after("5m");
    if (a->window().empty()) a->set_window("10s");
    if (a->interval().empty()) a->set_interval("2s");
  }
  if (!spec.has_idempotent()) spec.set_idempotent(true);
  if (spec.request_timeout().empty()) spec.set_request_timeout("30s");
  if (spec.max_body().empty()) spec.set_max_body("64MiB");
  return spec;
}

ServicePolicy PolicyOf(const v1::JobSpec& spec) {
  ServicePolicy p;
  p.min = std::max<uint32_t>(1, spec.replicas().min());
  p.max = std::max(p.min, spec.replicas().max());
  p.desired = std::clamp(spec.replicas().desired() == 0 ? p.min : spec.replicas().desired(), p.min, p.max);
  if (!spec.readiness().path().empty()) p.probe_path = spec.readiness().path();
  p.probe_period_ms = Ms(spec.readiness().period(), p.probe_period_ms);
  p.probe_timeout_ms = Ms(spec.readiness().timeout(), p.probe_timeout_ms);
  if (spec.readiness().failure_threshold() > 0) p.failure_threshold = spec.readiness().failure_threshold();
  p.autoscale = spec.has_autoscale();
  if (p.autoscale) {
    const auto& a = spec.autoscale();
    p.target_rps = a.target_rps_per_replica();
    p.up_after_ms = Ms(a.scale_up_after(), p.up_after_ms);
    p.down_after_ms = Ms(a.scale_down_after(), p.down_after_ms);
    p.window_ms = Ms(a.window(), p.window_ms);
    p.interval_ms = Ms(a.interval(), p.interval_ms);
  }
  p.spot_share = spec.spot_replicas();
  p.idempotent = !spec.has_idempotent() || spec.idempotent();
  p.request_timeout_ms = Ms(spec.request_timeout(), p.request_timeout_ms);
  if (auto b = ParseSizeBytes(spec.max_body()); b.ok()) p.max_body = *b;
  return p;
}

v1::JobSpec ReplicaSpec(const v1::JobSpec& service, const std::string& service_id, bool spot) {
  v1::JobSpec r = service;
  r.clear_kind();
  r.clear_replicas();
  r.clear_readiness();
  r.clear_autoscale();
  r.clear_spot_replicas();
  r.clear_idempotent();
  r.clear_request_timeout();
  r.clear_max_body();
  r.set_service(service_id);
  r.set_name(StrCat(service.name().empty() ? "service" : service.name(), "-replica"));
  r.set_gpus(1);
  r.set_max_sites(1);
  r.set_priority(spot ? "spot" : service.priority());
  // A replica runs until the service lets it go; its estimate only feeds
  // backfill, which must not expect it to end soon.
  r.set_estimated_duration("24h");
  r.clear_time_limit();
  r.set_recovery("restart");
  return r;
}

uint32_t SpotAllowance(const ServicePolicy& p, uint32_t desired) {
  if (desired <= p.min) return 0;
  return static_cast<uint32_t>(std::floor(p.spot_share * (desired - p.min) + 1e-9));
}

}  // namespace fedgate::federation
