// fedctl links [probe SITE] | capacity | datasets list: what this site
// measured and knows.
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/str_cat.h"
#include "federation/dataset.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "gateway/cli/command.h"

namespace fedgate::cli {
namespace {

std::string CapacityTable(const v1::GetCapacityResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : resp.sites()) {
    std::string models;
    for (const auto& m : s.models()) {
      if (!models.empty()) models += ", ";
      models += StrCat(m.model(), " ", m.free_gpus(), "/", m.total_gpus());
    }
    rows.push_back({s.site(), v1::SiteCapacity::State_Name(s.state()), absl::StrFormat("%.1fs", s.age_seconds()),
                    StrCat(s.free_gpus()), StrCat(s.total_gpus()), models});
  }
  return RenderTable({"SITE", "STATE", "AGE", "FREE", "TOTAL", "MODELS (free/total)"},
                                   rows);
}

std::string LinksTable(const v1::ListLinksResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : resp.links()) {
    rows.push_back({l.from(), l.to(), absl::StrFormat("%.4f", l.gbps()),
                    absl::StrFormat("%.3f", l.latency_ms()), l.method(), absl::StrCat(l.streams()),
                    absl::StrFormat("%.0fs", l.age_seconds())});
  }
  if (rows.empty()) return "no measured links yet (fedctl links probe SITE measures one)\n";
  return RenderTable(
      {"FROM", "TO", "GBIT/S", "LATENCY MS", "METHOD", "STREAMS", "AGE"}, rows);
}

std::string DatasetsTable(const v1::ListDatasetsResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : resp.datasets()) {
    std::string sites;
    for (const auto& s : d.sites()) sites += StrCat(sites.empty() ? "" : ", ", s);
    rows.push_back({d.name(), d.version().empty() ? "-" : d.version(),
                    federation::HumanBytes(d.bytes()), StrCat(d.files()), d.digest().substr(0, 12),
                    sites});
  }
  if (rows.empty()) return "no site announces a dataset\n";
  return RenderTable({"NAME", "VERSION", "SIZE", "FILES", "DIGEST", "SITES"}, rows);
}

}  // namespace

void AddLinksCommands(CLI::App& app, Commands* out) {
  auto* links = app.add_subcommand("links", "the measured bandwidth matrix as this site sees it");
  auto site = std::make_shared<std::string>();
  auto* probe = links->add_subcommand("probe", "measure the link from this site to SITE now");
  probe->add_option("site", *site, "peer site")->required();
  auto* capacity = app.add_subcommand("capacity", "every site this gateway knows, itself too");
  auto* datasets = app.add_subcommand("datasets", "datasets the federation's sites hold");
  datasets->require_subcommand(1);
  auto* datasets_list = datasets->add_subcommand("list", "every dataset and the sites holding it");
  out->push_back({datasets_list, [](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::ListDatasetsResponse resp;
                    CheckRpc(admin->ListDatasets(&ctx, {}, &resp), g, "datasets list");
                    Print(resp, g.format(), DatasetsTable(resp));
                    return 0;
                  }});

  // `links probe` before `links`: a parsed leaf wins over its parent.
  out->push_back({probe, [site](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
                    v1::ProbeLinkRequest req;
                    req.set_site(*site);
                    v1::ProbeLinkResponse resp;
                    std::fprintf(stderr, "probing the link to %s ...\n", site->c_str());
                    CheckRpc(admin->ProbeLink(&ctx, req, &resp), g, "links probe");
                    v1::ListLinksResponse one;
                    *one.add_links() = resp.link();
                    Print(resp, g.format(), LinksTable(one));
                    return 0;
                  }});
  out->push_back({links, [](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::ListLinksResponse resp;
                    CheckRpc(admin->ListLinks(&ctx, {}, &resp), g, "links");
                    Print(resp, g.format(), LinksTable(resp));
                    return 0;
                  }});
  out->push_back({capacity, [](const Globals& g) {
                    auto admin = v1::AdminService::NewStub(Connect(g));
                    grpc::ClientContext ctx;
                    SetDeadline(&ctx);
                    v1::GetCapacityResponse resp;
                    CheckRpc(admin->GetCapacity(&ctx, {}, &resp), g, "capacity");
                    Print(resp, g.format(), CapacityTable(resp));
                    return 0;
                  }});
}

}  // namespace fedgate::cli
