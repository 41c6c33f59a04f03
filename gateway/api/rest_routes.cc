#include "gateway/api/rest_routes.h"

#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <map>
#include <optional>

#include "base/number.h"
#include "base/str_cat.h"
#include "base/text.h"

namespace fedgate::gateway {
namespace {

absl::Status FromJson(const std::string& body, google::protobuf::Message* m) {
  if (body.empty()) return absl::InvalidArgumentError("empty body: a JSON object is required");
  google::protobuf::util::JsonParseOptions strict;  // unknown fields are errors
  auto st = google::protobuf::util::JsonStringToMessage(body, m, strict);
  if (!st.ok()) return absl::InvalidArgumentError(StrCat("bad JSON body: ", st.message()));
  return absl::OkStatus();
}

// A whole decimal number that fits T, or an error naming the parameter.
template <typename T>
absl::StatusOr<T> Number(const std::map<std::string, std::string>& q, const std::string& name) {
  auto it = q.find(name);
  if (it == q.end()) return T{0};
  const auto v = ParseNumber<T>(it->second);
  if (!v) {
    return absl::InvalidArgumentError(StrCat(name, " must be a whole number, got \"",
                                             it->second.substr(0, 40), "\""));
  }
  return *v;
}

// /v1/jobs/{rest}: a cancel, a rank's logs, the virtual cluster or the job;
// nullopt when `rest` names none of them.
std::optional<absl::Status> RouteJob(bool get, bool post, const std::string& rest,
                                     const std::map<std::string, std::string>& query,
                                     RestCall* out) {
  RestCall& call = *out;
  if (post && rest.size() > 7 && rest.ends_with(":cancel")) {
    call.kind = RestCall::Kind::kCancel;
    call.cancel.set_id(rest.substr(0, rest.size() - 7));
    return absl::OkStatus();
  }
  if (get && rest.ends_with("/logs")) {
    call.kind = RestCall::Kind::kLogs;
    call.logs.set_id(rest.substr(0, rest.size() - 5));
    auto rank = Number<uint32_t>(query, "rank");
    if (!rank.ok()) return rank.status();
    auto offset = Number<uint64_t>(query, "offset");
    if (!offset.ok()) return offset.status();
    call.logs.set_rank(*rank);
    call.logs.set_offset(*offset);
    return absl::OkStatus();
  }
  if (get && rest.ends_with("/vc") && rest.size() > 3 &&
      rest.find('/') == rest.size() - 3) {
    call.kind = RestCall::Kind::kVc;
    call.get.set_id(rest.substr(0, rest.size() - 3));
    return absl::OkStatus();
  }
  if (get && rest.ends_with("/events") && rest.find('/') == rest.size() - 7) {
    call.kind = RestCall::Kind::kEvents;
    call.events.set_id(rest.substr(0, rest.size() - 7));
    auto after = Number<uint64_t>(query, "after_seq");
    if (!after.ok()) return after.status();
    call.events.set_after_seq(*after);
    return absl::OkStatus();
  }
  if (get && rest.find('/') == std::string::npos) {
    call.kind = RestCall::Kind::kGet;
    call.get.set_id(rest);
    return absl::OkStatus();
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<RestCall> RouteRest(std::string_view method, std::string_view target,
                                   const std::string& body) {
  const size_t q = target.find('?');
  const std::string path(target.substr(0, q));
  const auto query = ParseQuery(q == std::string_view::npos ? "" : target.substr(q + 1));
  const bool get = method == "GET", post = method == "POST";
  constexpr std::string_view kJobs = "/v1/jobs";
  RestCall call;
  if (path == kJobs && post) {
    if (auto st = FromJson(body, &call.submit); !st.ok()) return st;
    call.kind = RestCall::Kind::kSubmit;
    return call;
  }
  if (path == kJobs && get) {
    call.kind = RestCall::Kind::kList;
    if (query.contains("state") && !query.at("state").empty()) {
      v1::Job::State s;
      if (!v1::Job::State_Parse(query.at("state"), &s) || s == v1::Job::STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            StrCat("unknown state \"", query.at("state").substr(0, 40),
                   "\" (want PENDING, RESERVING, RUNNING, SUCCEEDED, FAILED or CANCELLED)"));
      }
      call.list.set_state(s);
    }
    if (query.contains("page_token")) call.list.set_page_token(query.at("page_token"));
    auto size = Number<uint32_t>(query, "page_size");
    if (!size.ok()) return size.status();
    call.list.set_page_size(*size);
    return call;
  }
  if (get && (path == "/v1/sites" || path == "/v1/links" || path == "/v1/nodes" ||
              path == "/v1/datasets")) {
    call.kind = path == "/v1/sites"      ? RestCall::Kind::kSites
                : path == "/v1/links"    ? RestCall::Kind::kLinks
                : path == "/v1/datasets" ? RestCall::Kind::kDatasets
                                         : RestCall::Kind::kNodes;
    return call;
  }
  if (path == "/v1/services" && get) {
    call.kind = RestCall::Kind::kServices;
    if (query.contains("name")) call.services.set_name(query.at("name"));
    return call;
  }
  if (path == "/v1/quotas" && get) {
    call.kind = RestCall::Kind::kQuotas;
    if (query.contains("tenant")) call.quotas.set_tenant(query.at("tenant"));
    return call;
  }
  if (path == "/v1/usage" && get) {
    call.kind = RestCall::Kind::kUsage;
    for (const char* k : {"tenant", "since", "until", "by"}) {
      if (!query.contains(k)) continue;
      const std::string& v = query.at(k);
      if (std::string_view(k) == "tenant") call.usage.set_tenant(v);
      if (std::string_view(k) == "since") call.usage.set_since(v);
      if (std::string_view(k) == "until") call.usage.set_until(v);
      if (std::string_view(k) == "by") call.usage.set_by(v);
    }
    return call;
  }
  if (path.rfind(std::string(kJobs) + "/", 0) == 0) {
    if (auto routed = RouteJob(get, post, path.substr(kJobs.size() + 1), query, &call); routed) {
      if (!routed->ok()) return *routed;
      switch (call.kind) {
        case RestCall::Kind::kCancel: call.job_id = call.cancel.id(); break;
        case RestCall::Kind::kLogs: call.job_id = call.logs.id(); break;
        case RestCall::Kind::kEvents: call.job_id = call.events.id(); break;
        default: call.job_id = call.get.id(); break;
      }
      if (query.contains("follow")) {
        const std::string& f = query.at("follow");
        if (f != "true" && f != "false") {
          return absl::InvalidArgumentError(
              StrCat("follow must be true or false, got \"", f.substr(0, 40), "\""));
        }
        call.follow = f == "true";
      }
      return call;
    }
  }
  return absl::NotFoundError(StrCat(method, " ", path.substr(0, 200), " is not an endpoint"));
}

std::map<std::string, std::string> ParseQuery(std::string_view q) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < q.size()) {
    size_t amp = q.find('&', pos);
    if (amp == std::string_view::npos) amp = q.size();
    std::string_view kv = q.substr(pos, amp - pos);
    size_t eq = kv.find('=');
    out[std::string(kv.substr(0, eq))] =
        eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
    pos = amp + 1;
  }
  return out;
}

int RestHttpStatus(absl::StatusCode c) {
  switch (c) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string RestErrorBody(std::string_view code, std::string_view message) {
  return StrCat("{\"error\": {\"code\": \"", JsonEscape(code), "\", \"message\": \"",
                JsonEscape(message), "\"}}\n");
}

std::string RestErrorBody(const absl::Status& st) {
  return RestErrorBody(absl::StatusCodeToString(st.code()),
                       std::string_view(st.message().data(), st.message().size()));
}

}  // namespace fedgate::gateway
