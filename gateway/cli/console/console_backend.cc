#include "gateway/cli/console/console_backend.h"

#include <chrono>

#include "absl/status/status.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/api/rest_routes.h"
#include "gateway/cli/output.h"

namespace fedgate::cli {

namespace {

// gRPC's codes are absl's: the same status and body as the gateway's REST API.
ConsoleReply Failed(const grpc::Status& st) {
  const absl::Status as(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
  ConsoleReply r;
  r.status = gateway::RestHttpStatus(as.code());
  r.body = gateway::RestErrorBody(as);
  return r;
}

// One unary call with fedctl's 10-second deadline; the document or the error.
template <typename Call, typename Resp>
ConsoleReply Unary(Call call, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status st = call(&ctx, resp);
  if (!st.ok()) return Failed(st);
  ConsoleReply r;
  r.body = ToJson(*resp);
  return r;
}

// A rank's output from `offset`, at most what one read returns (1 MiB);
// X-Fedgate-Next-Offset says where the next read starts.
ConsoleReply Logs(v1::JobService::Stub* jobs, v1::LogsRequest req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  req.set_follow(false);
  auto reader = jobs->Logs(&ctx, req);
  v1::LogsResponse chunk;
  ConsoleReply r;
  r.content_type = "text/plain; charset=utf-8";
  std::string state = "STATE_UNSPECIFIED";
  if (reader->Read(&chunk)) {
    r.body = chunk.content();
    state = v1::Job::State_Name(chunk.state());
    ctx.TryCancel();  // one chunk per reply; the page asks again from the next offset
  }
  const grpc::Status st = reader->Finish();
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return Failed(st);
  r.headers.emplace_back("X-Fedgate-Next-Offset", std::to_string(req.offset() + r.body.size()));
  r.headers.emplace_back("X-Fedgate-Job-State", state);
  return r;
}

}  // namespace

ConsoleReply ConsoleBackend::Answer(const std::string& method, const std::string& target) const {
  auto call = gateway::RouteRest(method, target, "");
  if (!call.ok()) {
    ConsoleReply r;
    r.status = call.status().code() == absl::StatusCode::kNotFound ? 404 : 400;
    r.body = gateway::RestErrorBody(call.status());
    return r;
  }
  auto jobs = v1::JobService::NewStub(channel_);
  auto admin = v1::AdminService::NewStub(channel_);
  using K = gateway::RestCall::Kind;
  switch (call->kind) {
    case K::kSubmit: {
      ConsoleReply r;
      r.status = 405;
      r.body = gateway::RestErrorBody("METHOD_NOT_ALLOWED",
                                      "the console does not submit jobs: fedctl jobs submit");
      return r;
    }
    case K::kList: {
      // Every page, as `fedctl jobs list -o json` prints them.
      v1::ListJobsResponse all;
      v1::ListJobsRequest req = call->list;
      do {
        v1::ListJobsResponse page;
        auto r = Unary([&](grpc::ClientContext* c, v1::ListJobsResponse* p) { return jobs->List(c, req, p); },
                       &page);
        if (r.status != 200) return r;
        for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
        req.set_page_token(page.next_page_token());
      } while (!req.page_token().empty());
      ConsoleReply r;
      r.body = ToJson(all);
      return r;
    }
    case K::kGet: {
      v1::GetJobResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::GetJobResponse* p) { return jobs->Get(c, call->get, p); }, &resp);
    }
    case K::kVc: {
      v1::GetJobResponse resp;
      auto r = Unary([&](grpc::ClientContext* c, v1::GetJobResponse* p) { return jobs->Get(c, call->get, p); }, &resp);
      if (r.status == 200) r.body = ToJson(resp.job().run());
      return r;
    }
    case K::kCancel: {
      v1::CancelJobResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::CancelJobResponse* p) { return jobs->Cancel(c, call->cancel, p); }, &resp);
    }
    case K::kLogs: return Logs(jobs.get(), call->logs);
    case K::kUsage: {
      v1::UsageResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::UsageResponse* p) { return jobs->Usage(c, call->usage, p); }, &resp);
    }
    case K::kQuotas: {
      v1::QuotasResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::QuotasResponse* p) { return jobs->Quotas(c, call->quotas, p); }, &resp);
    }
    case K::kEvents: {
      v1::JobEventsResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::JobEventsResponse* p) { return jobs->Events(c, call->events, p); }, &resp);
    }
    case K::kServices: {
      v1::ListServicesResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::ListServicesResponse* p) { return jobs->ListServices(c, call->services, p); }, &resp);
    }
    case K::kSites: {
      v1::GetCapacityResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::GetCapacityResponse* p) { return admin->GetCapacity(c, {}, p); }, &resp);
    }
    case K::kLinks: {
      v1::ListLinksResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::ListLinksResponse* p) { return admin->ListLinks(c, {}, p); }, &resp);
    }
    case K::kDatasets: {
      v1::ListDatasetsResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::ListDatasetsResponse* p) { return admin->ListDatasets(c, {}, p); }, &resp);
    }
    case K::kNodes: {
      v1::ListNodesResponse resp;
      return Unary([&](grpc::ClientContext* c, v1::ListNodesResponse* p) { return admin->ListNodes(c, {}, p); }, &resp);
    }
  }
  return ConsoleReply{404, "application/json", gateway::RestErrorBody("NOT_FOUND", "no such endpoint"),
                      {}};
}

}  // namespace fedgate::cli
