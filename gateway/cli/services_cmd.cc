// fedctl services list | get NAME | scale NAME --min N --max M | logs NAME
// [--replica N] | token NAME [--revoke] | delete NAME: a tenant's inference services (docs/services.md),
// asked of the gateway that coordinates them. A service is created with
// `fedctl jobs submit` of a `kind: service` spec.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {
namespace {

struct Opts {
  std::string name;
  uint32_t min = 0, max = 0;
  int replica = 0;
  bool follow = false;
  bool revoke = false;
};

std::string ServicesTable(const v1::ListServicesResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : resp.services()) {
    const auto& r = s.replicas();
    rows.push_back({s.name(), s.id(), v1::Job::State_Name(s.state()),
                    absl::StrCat(r.ready(), "/", r.desired()), absl::StrCat(r.min(), "-", r.max()),
                    absl::StrFormat("%.1f", s.rps()), s.endpoint()});
  }
  return rows.empty() ? std::string("no services\n")
                      : RenderTable({"NAME", "ID", "STATE", "READY", "REPLICAS", "RPS", "ENDPOINT"}, rows);
}

std::string ServiceTable(const v1::Service& s) {
  v1::ListServicesResponse one;
  *one.add_services() = s;
  std::string out = ServicesTable(one) + "\n" + s.reason() + "\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : s.members()) {
    rows.push_back({m.id(), m.site(), m.address(), m.ready() ? "yes" : "no", absl::StrCat(m.in_flight())});
  }
  if (!rows.empty()) out += "\n" + RenderTable({"REPLICA", "SITE", "ADDRESS", "READY", "IN FLIGHT"}, rows);
  return out;
}

v1::Service Find(v1::JobService::Stub* stub, const Globals& g, const std::string& name) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListServicesRequest req;
  req.set_name(name);
  v1::ListServicesResponse resp;
  CheckRpc(stub->ListServices(&ctx, req, &resp), g, "services get");
  if (resp.services_size() == 0) Die(absl::StrCat("no running service \"", name, "\""), 1);
  return resp.services(0);
}

int List(const Globals& g, const Opts&) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListServicesResponse resp;
  CheckRpc(stub->ListServices(&ctx, {}, &resp), g, "services list");
  Print(resp, g.format(), ServicesTable(resp));
  return 0;
}

int Get(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  v1::ListServicesResponse resp;
  *resp.add_services() = Find(stub.get(), g, o.name);
  Print(resp, g.format(), ServiceTable(resp.services(0)));
  return 0;
}

int Scale(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ScaleServiceRequest req;
  req.set_name(o.name);
  req.set_min(o.min);
  req.set_max(o.max);
  v1::ScaleServiceResponse resp;
  CheckRpc(stub->ScaleService(&ctx, req, &resp), g, "services scale");
  Print(resp, g.format(), ServiceTable(resp.service()));
  return 0;
}

int Delete(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  const v1::Service s = Find(stub.get(), g, o.name);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CancelJobRequest req;
  req.set_id(s.id());
  v1::CancelJobResponse resp;
  CheckRpc(stub->Cancel(&ctx, req, &resp), g, "services delete");
  Print(resp, g.format(),
        absl::StrCat("service ", o.name, " (", s.id(), ") deleted: its ", s.members_size(),
                     " replica(s) are being stopped\n"));
  return 0;
}

int Logs(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  const v1::Service s = Find(stub.get(), g, o.name);
  if (o.replica < 0 || o.replica >= s.members_size()) {
    Die(absl::StrCat("service ", o.name, " has ", s.members_size(), " running replica(s); --replica ",
                     o.replica, " is not one of them"),
        2);
  }
  grpc::ClientContext ctx;
  v1::LogsRequest req;
  req.set_id(s.members(o.replica).id());
  req.set_follow(o.follow);
  auto reader = stub->Logs(&ctx, req);
  v1::LogsResponse chunk;
  while (reader->Read(&chunk)) {
    std::fwrite(chunk.content().data(), 1, chunk.content().size(), stdout);
    std::fflush(stdout);
  }
  CheckRpc(reader->Finish(), g, "services logs");
  return 0;
}

int Token(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ServiceTokenRequest req;
  req.set_name(o.name);
  req.set_revoke(o.revoke);
  v1::ServiceTokenResponse resp;
  CheckRpc(stub->ServiceToken(&ctx, req, &resp), g, "services token");
  Print(resp, g.format(),
        o.revoke ? absl::StrCat("the bearer token of service ", o.name, " is revoked\n")
                 : absl::StrCat(resp.token(), "\n"));
  return 0;
}

}  // namespace

void AddServicesCommands(CLI::App& app, Commands* out) {
  auto o = std::make_shared<Opts>();
  auto add = [&](CLI::App* sub, int (*fn)(const Globals&, const Opts&)) {
    out->push_back({sub, [o, fn](const Globals& g) { return fn(g, *o); }});
  };
  auto* svc = app.add_subcommand("services", "inference services (kind: service jobs)");
  svc->require_subcommand(1);
  add(svc->add_subcommand("list", "your running services"), List);
  auto* get = svc->add_subcommand("get", "one service and its replicas");
  get->add_option("name", o->name, "service name")->required();
  add(get, Get);
  auto* scale = svc->add_subcommand("scale", "set a service's replica range");
  scale->add_option("name", o->name, "service name")->required();
  scale->add_option("--min", o->min, "fewest replicas (>= 1)")->required();
  scale->add_option("--max", o->max, "most replicas (>= min)")->required();
  add(scale, Scale);
  auto* logs = svc->add_subcommand("logs", "a replica's output");
  logs->add_option("name", o->name, "service name")->required();
  logs->add_option("--replica", o->replica, "which running replica, from 0 (as services get lists them)");
  logs->add_flag("--follow", o->follow, "keep printing new output");
  add(logs, Logs);
  auto* token = svc->add_subcommand(
      "token", "a bearer token for the service on listen.serve (replaces the last; shown once)");
  token->add_option("name", o->name, "service name")->required();
  token->add_flag("--revoke", o->revoke, "revoke the service's token instead");
  add(token, Token);
  auto* del = svc->add_subcommand("delete", "stop a service and every replica");
  del->add_option("name", o->name, "service name")->required();
  add(del, Delete);
}

}  // namespace fedgate::cli
