// fedctl nodes list | cordon | uncordon | drain NODE: this site's nodes, as
// its admins see and steer them.
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_join.h"
#include "base/str_cat.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {
namespace {

std::string NodesTable(const std::vector<v1::NodeView>& nodes) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : nodes) {
    rows.push_back({n.name(), n.gpu_model(), std::to_string(n.gpus()), std::to_string(n.free_gpus()),
                    n.unhealthy_gpus().empty() ? "-" : absl::StrJoin(n.unhealthy_gpus(), ","),
                    n.cordoned() ? "cordoned" : "schedulable", std::to_string(n.running_slices())});
  }
  return RenderTable({"NODE", "MODEL", "GPUS", "FREE", "UNHEALTHY", "STATE", "SLICES"}, rows);
}

v1::ListNodesResponse ListNodes(const Globals& g) {
  auto admin = v1::AdminService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListNodesResponse resp;
  CheckRpc(admin->ListNodes(&ctx, {}, &resp), g, "nodes list");
  return resp;
}

}  // namespace

void AddNodesCommands(CLI::App& app, Commands* out) {
  auto* nodes = app.add_subcommand("nodes", "list, cordon, uncordon or drain this site's nodes");
  nodes->require_subcommand(1);
  struct Opts {
    std::string node;
    bool preempt = false;
    int timeout_s = 600;
  };
  auto o = std::make_shared<Opts>();
  auto* list = nodes->add_subcommand("list", "nodes: GPUs, free, unhealthy, cordon state, slices");
  auto* cordon = nodes->add_subcommand("cordon", "stop new work on a node (running work stays)");
  auto* uncordon = nodes->add_subcommand("uncordon", "let a cordoned node take work again");
  auto* drain = nodes->add_subcommand(
      "drain", "cordon a node, then wait until its slices ended (--preempt: stop them now; "
               "their jobs retry elsewhere)");
  for (auto* c : {cordon, uncordon, drain}) c->add_option("node", o->node, "node name")->required();
  drain->add_flag("--preempt", o->preempt, "stop the slices running there instead of waiting");
  drain->add_option("--timeout", o->timeout_s, "seconds to wait for the node to empty (default 600)");

  out->push_back({list, [](const Globals& g) {
                    auto resp = ListNodes(g);
                    Print(resp, g.format(), NodesTable({resp.nodes().begin(), resp.nodes().end()}));
                    return 0;
                  }});
  auto act = [o](v1::CordonNodeRequest::Action action, const char* what) {
    return [o, action, what](const Globals& g) {
      auto admin = v1::AdminService::NewStub(Connect(g));
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      v1::CordonNodeRequest req;
      req.set_node(o->node);
      req.set_action(action);
      req.set_preempt(o->preempt);
      v1::CordonNodeResponse resp;
      CheckRpc(admin->CordonNode(&ctx, req, &resp), g, what);
      if (action == v1::CordonNodeRequest::DRAIN) {
        if (g.format() == Format::kTable && resp.stopped_slices() > 0) {
          std::fprintf(stderr, "stopping %u slice(s) on %s\n", resp.stopped_slices(), o->node.c_str());
        }
        // Wait until nothing runs there (stopping slices included).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o->timeout_s);
        for (;;) {
          bool empty = true;
          const v1::ListNodesResponse now = ListNodes(g);
          for (const auto& n : now.nodes()) {
            if (n.name() == o->node) {
              empty = n.running_slices() == 0;
              *resp.mutable_node() = n;
            }
          }
          if (empty) break;
          if (std::chrono::steady_clock::now() > deadline) {
            Die(StrCat("nodes drain: ", o->node, " still runs ", resp.node().running_slices(),
                       " slice(s) after ", o->timeout_s, " s (it stays cordoned)"));
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
      }
      Print(resp, g.format(), NodesTable({resp.node()}));
      return 0;
    };
  };
  out->push_back({cordon, act(v1::CordonNodeRequest::CORDON, "nodes cordon")});
  out->push_back({uncordon, act(v1::CordonNodeRequest::UNCORDON, "nodes uncordon")});
  out->push_back({drain, act(v1::CordonNodeRequest::DRAIN, "nodes drain")});
}

}  // namespace fedgate::cli
