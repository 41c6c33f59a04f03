// The REST API's routes as a pure function: an HTTP method, target and body
// become one job-API request (or a clear error), with no socket, TLS or job
// manager involved, so the decoding that faces the network is fuzzed alone.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::gateway {

struct RestCall {
  enum class Kind { kSubmit, kList, kCancel, kLogs, kGet, kUsage, kQuotas, kVc, kSites, kLinks,
                    kNodes, kEvents, kDatasets, kServices };
  Kind kind = Kind::kGet;
  v1::SubmitJobRequest submit;
  v1::ListJobsRequest list;
  v1::CancelJobRequest cancel;
  v1::LogsRequest logs;
  v1::GetJobRequest get;
  v1::UsageRequest usage;
  v1::QuotasRequest quotas;
  v1::JobEventsRequest events;
  v1::ListServicesRequest services;
  // A call about one job (get, vc, events, logs, cancel): its id, and
  // whether it may be redirected to the job's coordinator (?follow=false: no).
  std::string job_id;
  bool follow = true;
};

// POST /v1/jobs (JSON SubmitJobRequest), GET /v1/jobs?state=&page_token=&page_size=,
// POST /v1/jobs/{id}:cancel, GET /v1/jobs/{id}/logs?rank=&offset=, GET /v1/jobs/{id},
// GET /v1/usage?tenant=&since=&until=&by=.
// GET /v1/quotas?tenant=, GET /v1/jobs/{id}/vc (the virtual cluster: `get`
// names the job), GET /v1/sites (= fedctl capacity), GET /v1/links,
// GET /v1/nodes (this site's nodes; its admins only),
// GET /v1/jobs/{id}/events?after_seq= (the job's story), GET /v1/datasets,
// GET /v1/services?name= (the caller's running services).
// The calls about one job take ?follow=false (this gateway's own view).
// INVALID_ARGUMENT for a bad body or query, NOT_FOUND for any other target.
absl::StatusOr<RestCall> RouteRest(std::string_view method, std::string_view target,
                                   const std::string& body);

// The HTTP status of a call's outcome, as the REST API and fedctl console
// answer it (400, 401, 403, 404, 409, 429, 501, 503, 504, else 500).
int RestHttpStatus(absl::StatusCode code);
// {"error": {"code": "NOT_FOUND", "message": "..."}}
std::string RestErrorBody(const absl::Status& st);
std::string RestErrorBody(std::string_view code, std::string_view message);
// A query string's parameters (a=1&b=2); the last of a repeated name wins.
std::map<std::string, std::string> ParseQuery(std::string_view query);

}  // namespace fedgate::gateway
