// fedctl quota list | get | set: tenant quotas as their home sites advertise
// them; `set` by the admins of the tenant's home site.
#include <algorithm>
#include <memory>

#include "absl/strings/str_join.h"
#include "base/str_cat.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {
namespace {

std::string QuotaTable(const std::vector<v1::TenantQuota>& quotas) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& q : quotas) {
    std::vector<std::string> models;
    for (const auto& [m, g] : q.models()) models.push_back(StrCat(m, "=", g));
    std::sort(models.begin(), models.end());
    rows.push_back({q.tenant(), q.home(), std::to_string(q.gpus()), std::to_string(q.borrow()),
                    models.empty() ? "-" : absl::StrJoin(models, ","),
                    std::to_string(q.used_gpus()), std::to_string(q.borrowed_gpus()),
                    q.error().empty() ? "-" : q.error()});
  }
  return RenderTable({"TENANT", "HOME", "GPUS", "BORROW", "MODELS", "USED", "BORROWED", "ERROR"},
                     rows);
}

}  // namespace

void AddQuotaCommands(CLI::App& app, Commands* out) {
  auto* quota = app.add_subcommand("quota", "tenant GPU quotas across the federation");
  quota->require_subcommand(1);
  struct Opts {
    std::string tenant, model;
    int64_t gpus = -1, model_gpus = -1, borrow = 0;
    double weight = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* list = quota->add_subcommand("list", "every governed tenant: quota, home site, use now");
  auto* get = quota->add_subcommand("get", "one tenant's quota and use (yours by default)");
  get->add_option("--tenant", o->tenant, "tenant (admins; a tenant sees only its own)");
  auto* set = quota->add_subcommand(
      "set", "set a tenant's quota with this site as its home (admins of that site)");
  set->add_option("--tenant", o->tenant, "tenant")->required();
  set->add_option("--gpus", o->gpus, "guaranteed GPUs in total")->required();
  set->add_option("--model", o->model, "limit one GPU model (with --model-gpus)");
  set->add_option("--model-gpus", o->model_gpus, "guaranteed GPUs of --model");
  set->add_option("--borrow", o->borrow, "GPUs beyond the quota it may borrow (preemptible)");
  set->add_option("--weight", o->weight, "fair-share weight (default: keep, or 1)");

  auto show = [o](bool all) {
    return [o, all](const Globals& g) {
      auto jobs = v1::JobService::NewStub(Connect(g));
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      v1::QuotasRequest req;
      if (!all) req.set_tenant(o->tenant);
      v1::QuotasResponse resp;
      CheckRpc(jobs->Quotas(&ctx, req, &resp), g, all ? "quota list" : "quota get");
      Print(resp, g.format(), QuotaTable({resp.quotas().begin(), resp.quotas().end()}));
      return 0;
    };
  };
  out->push_back({list, show(true)});
  out->push_back({get, show(false)});
  out->push_back({set, [o](const Globals& g) {
                    if (o->gpus < 0 || o->borrow < 0) Die("quota set: --gpus and --borrow must be >= 0");
                    if (o->model.empty() != (o->model_gpus < 0)) {
                      Die("quota set: --model and --model-gpus go together");
                    }
                    v1::SetQuotaRequest req;
                    req.set_tenant(o->tenant);
                    req.set_gpus(static_cast<uint32_t>(o->gpus));
                    req.set_borrow(static_cast<uint32_t>(o->borrow));
                    req.set_weight(o->weight);
                    if (!o->model.empty()) {
                      (*req.mutable_models())[o->model] = static_cast<uint32_t>(o->model_gpus);
                    }
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::SetQuotaResponse resp;
                    CheckRpc(admin->SetQuota(&ctx, req, &resp), g, "quota set");
                    Print(resp, g.format(), QuotaTable({resp.quota()}));
                    return 0;
                  }});
}

}  // namespace fedgate::cli
