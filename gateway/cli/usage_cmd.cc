// fedctl usage: GPU-seconds (and cost) per tenant, site or model, gathered by
// the gateway from every reachable site's usage ledger. `-o csv` besides the
// usual forms.
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "base/str_cat.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {

void AddUsageCommands(CLI::App& app, Commands* out) {
  auto* usage = app.add_subcommand(
      "usage", "GPU-seconds and cost by tenant, site or model (-o table|json|yaml|csv)");
  auto req = std::make_shared<v1::UsageRequest>();
  usage->add_option_function<std::string>("--tenant", [req](const std::string& v) { req->set_tenant(v); },
                                          "one tenant (tenants always see only their own)");
  usage->add_option_function<std::string>("--since", [req](const std::string& v) { req->set_since(v); },
                                          "RFC 3339 time or a duration back from now (24h); default: all");
  usage->add_option_function<std::string>("--until", [req](const std::string& v) { req->set_until(v); },
                                          "RFC 3339 time or a duration back from now; default: now");
  usage->add_option_function<std::string>("--by", [req](const std::string& v) { req->set_by(v); },
                                          "tenant (default), site or model")
      ->check(CLI::IsMember({"tenant", "site", "model"}));
  out->push_back({usage, [req](const Globals& g) {
                    const bool csv = g.output == "csv";
                    Globals gg = g;
                    if (csv) gg.output = "table";
                    auto jobs = v1::JobService::NewStub(Connect(gg));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::UsageResponse resp;
                    CheckRpc(jobs->Usage(&ctx, *req, &resp), gg, "usage");
                    const std::string by = req->by().empty() ? "tenant" : req->by();
                    auto key = [&](const v1::UsageRow& r) {
                      return by == "tenant" ? r.tenant() : by == "site" ? r.site() : r.model();
                    };
                    for (const auto& s : resp.unreachable_sites()) {
                      std::fprintf(stderr, "fedctl usage: %s did not answer; its usage is missing\n",
                                   s.c_str());
                    }
                    if (csv) {
                      std::printf("%s,gpu_seconds,cost\n", by.c_str());
                      for (const auto& r : resp.usage()) {
                        std::printf("%s,%.3f,%.4f\n", key(r).c_str(), r.gpu_seconds(), r.cost());
                      }
                      return 0;
                    }
                    std::vector<std::vector<std::string>> rows;
                    for (const auto& r : resp.usage()) {
                      rows.push_back({key(r), absl::StrFormat("%.1f", r.gpu_seconds()),
                                      absl::StrFormat("%.2f", r.gpu_seconds() / 3600),
                                      absl::StrFormat("%.2f", r.cost())});
                    }
                    std::string table = StrCat("usage from ", resp.since(), " to ", resp.until(), "\n");
                    table += rows.empty() ? "no usage in this window\n"
                                          : RenderTable({absl::AsciiStrToUpper(by), "GPU-SECONDS",
                                                         "GPU-HOURS", "COST"},
                                                        rows);
                    Print(resp, gg.format(), table);
                    return 0;
                  }});
}

}  // namespace fedgate::cli
