// fedctl peers list | add | remove: the sites this gateway's admins approve.
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/str_cat.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {
namespace {

std::string PeersTable(const v1::ListPeersResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : resp.peers()) {
    rows.push_back({p.site(), p.endpoint(), v1::Peer::State_Name(p.state()),
                    p.last_heard_seconds() < 0 ? "never"
                                               : absl::StrFormat("%.1fs", p.last_heard_seconds()),
                    absl::StrFormat("%.2f", p.rtt_ms()), p.source(), p.last_error()});
  }
  if (rows.empty()) return "no approved peers\n";
  return RenderTable(
      {"SITE", "ENDPOINT", "STATE", "LAST HEARD", "RTT MS", "SOURCE", "LAST ERROR"}, rows);
}

}  // namespace

void AddPeersCommands(CLI::App& app, Commands* out) {
  auto* peers = app.add_subcommand("peers", "list, approve or remove peer sites");
  peers->require_subcommand(1);
  struct Opts {
    std::string site, endpoint;
  };
  auto o = std::make_shared<Opts>();
  auto* list = peers->add_subcommand("list", "approved peers and their state");
  auto* add = peers->add_subcommand("add", "approve a peer site (persisted)");
  add->add_option("--site", o->site, "peer site name")->required();
  add->add_option("--endpoint", o->endpoint, "its gateway HOST:PORT")->required();
  auto* remove = peers->add_subcommand("remove", "withdraw an approval made with add");
  remove->add_option("--site", o->site, "peer site name")->required();

  out->push_back({list, [](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::ListPeersResponse resp;
                    CheckRpc(admin->ListPeers(&ctx, {}, &resp), g, "peers list");
                    Print(resp, g.format(), PeersTable(resp));
                    return 0;
                  }});
  out->push_back({add, [o](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::AddPeerRequest req;
                    req.set_site(o->site);
                    req.set_endpoint(o->endpoint);
                    v1::AddPeerResponse resp;
                    CheckRpc(admin->AddPeer(&ctx, req, &resp), g, "peers add");
                    v1::ListPeersResponse one;
                    *one.add_peers() = resp.peer();
                    Print(resp, g.format(), PeersTable(one));
                    return 0;
                  }});
  out->push_back({remove, [o](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::RemovePeerRequest req;
                    req.set_site(o->site);
                    v1::RemovePeerResponse resp;
                    CheckRpc(admin->RemovePeer(&ctx, req, &resp), g, "peers remove");
                    Print(resp, g.format(), StrCat("removed peer ", o->site, "\n"));
                    return 0;
                  }});
}

}  // namespace fedgate::cli
