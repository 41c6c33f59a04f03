// A service's spec (kind: service): validation, defaults and the numbers the
// controller and proxy run by. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::federation {

inline bool IsService(const v1::JobSpec& spec) { return spec.kind() == "service"; }

// "64MiB", "1GiB", "512KiB", "1000" (bytes); also kB/MB/GB (powers of 10).
absl::StatusOr<uint64_t> ParseSizeBytes(std::string_view text);

// Errors name the field ("replicas.max 9 is over the limit of 64").
// Called by ValidateJobSpec for every spec: the service fields on a batch
// job are refused too.
absl::Status ValidateServiceFields(const v1::JobSpec& spec);

// The defaults of docs/services.md, filled into a service's spec.
v1::JobSpec WithServiceDefaults(v1::JobSpec spec);

// What the controller and proxy run by, from a spec with defaults.
struct ServicePolicy {
  uint32_t min = 1, max = 1, desired = 1;
  std::string probe_path = "/healthz";
  int64_t probe_period_ms = 2000, probe_timeout_ms = 1000;
  uint32_t failure_threshold = 3;
  bool autoscale = false;
  double target_rps = 0;
  int64_t up_after_ms = 15000, down_after_ms = 300000, window_ms = 10000, interval_ms = 2000;
  double spot_share = 0;
  bool idempotent = true;
  int64_t request_timeout_ms = 30000;
  uint64_t max_body = 64ull << 20;
};
ServicePolicy PolicyOf(const v1::JobSpec& spec);

// The spec of one replica: a one-rank batch job of the service's tenant
// that serves `service_id`; `spot` per the service's spot share.
v1::JobSpec ReplicaSpec(const v1::JobSpec& service, const std::string& service_id, bool spot);

// How many of `desired` replicas may be spot (the share of those above min).
uint32_t SpotAllowance(const ServicePolicy& p, uint32_t desired);

// The most replicas a service may ask for.
inline constexpr uint32_t kMaxReplicas = 64;

}  // namespace fedgate::federation
