// fedctl: the CLI of tenants and admins (DESIGN.md "Binaries").
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "federation/str_cat.h"
#include "absl/strings/str_format.h"
#include "federation/names.h"
#include "fedgate/v1/admin.grpc.pb.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "gateway/job_spec_yaml.h"
#include "gateway/bench_host.h"
#include "gateway/certs.h"
#include "gateway/cli/output.h"
#include "gateway/identity.h"
#include "gateway/tls.h"

namespace {

using fedgate::cli::Format;
namespace v1 = fedgate::v1;

struct Globals {
  std::string gateway;
  std::string tls_dir;
  std::string output = "table";
};

[[noreturn]] void Die(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "fedctl: %s\n", msg.c_str());
  std::exit(code);
}

Format ParseFormat(const std::string& o) {
  if (o == "table") return Format::kTable;
  if (o == "json") return Format::kJson;
  if (o == "yaml") return Format::kYaml;
  Die(fedgate::StrCat("unknown output format \"", o, "\" (want table, json or yaml)"), 2);
}

std::shared_ptr<grpc::Channel> Connect(const Globals& g) {
  std::string dir = g.tls_dir;
  if (dir.empty()) {
    const char* env = std::getenv("FEDCTL_TLS_DIR");
    if (env == nullptr || *env == '\0') {
      Die("no TLS identity: pass --tls-dir DIR (with ca.pem, cert.pem, key.pem) or set "
          "FEDCTL_TLS_DIR",
          2);
    }
    dir = env;
  }
  auto ca = fedgate::gateway::ReadFile(dir + "/ca.pem");
  auto cert = fedgate::gateway::ReadFile(dir + "/cert.pem");
  auto key = fedgate::gateway::ReadFile(dir + "/key.pem");
  if (!ca.ok() || !cert.ok() || !key.ok()) {
    Die(fedgate::StrCat("cannot read ca.pem, cert.pem and key.pem in ", dir));
  }
  auto me = fedgate::gateway::IdentityFromCertPem(*cert);
  if (!me.ok()) Die(fedgate::StrCat(dir, "/cert.pem: ", me.status().message()));
  std::string endpoint = g.gateway;
  if (endpoint.empty()) {
    const char* env = std::getenv("FEDCTL_GATEWAY");
    endpoint = env != nullptr && *env != '\0' ? env : "127.0.0.1:7443";
  }
  const std::string federation = me->federation;
  auto creds = fedgate::gateway::MakeChannelCredentials(
      fedgate::gateway::MakeStaticProvider(*ca, *cert, *key),
      [federation](const fedgate::gateway::Identity& id) {
        if (id.role != fedgate::gateway::Role::kGateway || id.federation != federation) {
          return absl::PermissionDeniedError(
              fedgate::StrCat("server ", id.ToUri(), " is not a gateway of ", federation));
        }
        return absl::OkStatus();
      });
  return grpc::CreateCustomChannel(endpoint, creds, fedgate::gateway::DefaultChannelArgs());
}

void CheckRpc(const grpc::Status& st, const Globals& g, const char* what) {
  if (st.ok()) return;
  std::string msg = st.error_message();
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
      st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    msg = fedgate::StrCat("gateway ", g.gateway.empty() ? "(default)" : g.gateway,
                       " unreachable or refused the TLS handshake: ", msg);
  }
  Die(fedgate::StrCat(what, " failed (", absl::StatusCodeToString(
                                           static_cast<absl::StatusCode>(st.error_code())),
                   "): ", msg));
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

void Print(const google::protobuf::Message& msg, Format f, const std::string& table) {
  switch (f) {
    case Format::kJson:
      std::cout << fedgate::cli::ToJson(msg) << "\n";
      break;
    case Format::kYaml:
      std::cout << fedgate::cli::JsonToYaml(fedgate::cli::ToJson(msg)) << "\n";
      break;
    case Format::kTable:
      std::cout << table;
      break;
  }
}

std::string PeersTable(const fedgate::v1::ListPeersResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : resp.peers()) {
    rows.push_back({p.site(), p.endpoint(), p.state(),
                    p.last_heard_seconds() < 0 ? "never"
                                               : absl::StrFormat("%.1fs", p.last_heard_seconds()),
                    absl::StrFormat("%.2f", p.rtt_ms()), p.source(), p.last_error()});
  }
  if (rows.empty()) return "no approved peers\n";
  return fedgate::cli::RenderTable(
      {"SITE", "ENDPOINT", "STATE", "LAST HEARD", "RTT MS", "SOURCE", "LAST ERROR"}, rows);
}

std::string CapacityTable(const fedgate::v1::GetCapacityResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : resp.sites()) {
    std::string models;
    for (const auto& m : s.models()) {
      if (!models.empty()) models += ", ";
      models += fedgate::StrCat(m.model(), " ", m.free_gpus(), "/", m.total_gpus());
    }
    rows.push_back({s.site(), s.state(), absl::StrFormat("%.1fs", s.age_seconds()),
                    fedgate::StrCat(s.free_gpus()), fedgate::StrCat(s.total_gpus()), models});
  }
  return fedgate::cli::RenderTable({"SITE", "STATE", "AGE", "FREE", "TOTAL", "MODELS (free/total)"},
                                   rows);
}

std::string LinksTable(const fedgate::v1::ListLinksResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : resp.links()) {
    rows.push_back({l.from(), l.to(), absl::StrFormat("%.4f", l.gbps()),
                    absl::StrFormat("%.3f", l.latency_ms()), l.method(), absl::StrCat(l.streams()),
                    absl::StrFormat("%.0fs", l.age_seconds())});
  }
  if (rows.empty()) return "no measured links yet (fedctl links probe SITE measures one)\n";
  return fedgate::cli::RenderTable(
      {"FROM", "TO", "GBIT/S", "LATENCY MS", "METHOD", "STREAMS", "AGE"}, rows);
}

std::string PlanTable(const fedgate::v1::PlanResponse& resp) {
  std::string out = resp.summary();
  if (resp.placeable() && resp.sites_size() > 1) {
    out += resp.bottleneck_gbps() > 0
               ? absl::StrFormat("; slowest link %.4f Gbit/s", resp.bottleneck_gbps())
               : std::string("; links between them not measured");
  }
  out += "\n\n";
  if (resp.placeable()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : resp.slices()) {
      rows.push_back({absl::StrCat(s.first_rank(), "-", s.first_rank() + s.gpus() - 1), s.site(),
                      s.node(), absl::StrCat(s.gpus())});
    }
    out += fedgate::cli::RenderTable({"RANKS", "SITE", "NODE", "GPUS"}, rows) + "\n";
  }
  std::vector<std::vector<std::string>> why;
  for (const auto& e : resp.explanation()) {
    why.push_back({e.site(), e.used() ? "yes" : "no", e.reason()});
  }
  return out + fedgate::cli::RenderTable({"SITE", "USED", "WHY"}, why);
}

std::string JobTable(const fedgate::v1::Job& j) {
  std::string out = absl::StrFormat("job %s (%s) of tenant %s: %s, attempt %u\n  %s\n", j.id(),
                                    j.name(), j.tenant(), j.state(), j.attempt(), j.reason());
  if (j.has_placement() && j.placement().explanation_size() > 0) {
    out += "\n" + PlanTable(j.placement());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedctl: manage a fedgate federation"};
  app.require_subcommand(1);
  app.fallthrough();
  Globals g;
  app.add_option("--gateway", g.gateway, "gateway HOST:PORT (default $FEDCTL_GATEWAY or 127.0.0.1:7443)");
  app.add_option("--tls-dir", g.tls_dir, "folder with ca.pem, cert.pem, key.pem (default $FEDCTL_TLS_DIR)");
  app.add_option("-o,--output", g.output, "table, json or yaml")->capture_default_str();

  // certs
  auto* certs = app.add_subcommand("certs", "create a federation CA and issue certificates");
  certs->require_subcommand(1);
  std::string ca_dir_init, federation;
  int ca_days = 3650;
  auto* init_ca = certs->add_subcommand("init-ca", "create a new CA for a federation");
  init_ca->add_option("--dir", ca_dir_init, "where to write ca.pem and ca-key.pem")->required();
  init_ca->add_option("--federation", federation, "federation (trust domain) name")->required();
  init_ca->add_option("--days", ca_days, "validity in days")->capture_default_str();

  std::string ca_dir, out_dir, site, role, name, tenant, user;
  std::vector<std::string> dns, ips;
  int leaf_days = 397;
  auto* issue = certs->add_subcommand("issue", "issue a gateway, admin or user certificate");
  issue->add_option("--ca-dir", ca_dir, "the CA folder from init-ca")->required();
  issue->add_option("--out", out_dir, "where to write ca.pem, cert.pem, key.pem")->required();
  issue->add_option("--site", site, "site of a gateway or admin");
  issue->add_option("--role", role, "gateway or admin");
  issue->add_option("--name", name, "admin name (default: admin)");
  issue->add_option("--tenant", tenant, "tenant of a user");
  issue->add_option("--user", user, "user name");
  issue->add_option("--dns", dns, "extra DNS SANs");
  issue->add_option("--ip", ips, "extra IP SANs");
  issue->add_option("--days", leaf_days, "validity in days")->capture_default_str();

  // peers
  auto* peers = app.add_subcommand("peers", "list, approve or remove peer sites");
  peers->require_subcommand(1);
  auto* peers_list = peers->add_subcommand("list", "approved peers and their state");
  std::string peer_site, peer_endpoint;
  auto* peers_add = peers->add_subcommand("add", "approve a peer site (persisted)");
  peers_add->add_option("--site", peer_site, "peer site name")->required();
  peers_add->add_option("--endpoint", peer_endpoint, "its gateway HOST:PORT")->required();
  auto* peers_remove = peers->add_subcommand("remove", "withdraw an approval made with add");
  peers_remove->add_option("--site", peer_site, "peer site name")->required();

  auto* capacity = app.add_subcommand("capacity", "every site this gateway knows, itself too");

  auto* links = app.add_subcommand("links", "the measured bandwidth matrix as this site sees it");
  std::string probe_site;
  auto* links_probe = links->add_subcommand("probe", "measure the link from this site to SITE now");
  links_probe->add_option("site", probe_site, "peer site")->required();

  auto* jobs = app.add_subcommand("jobs", "federated jobs");
  jobs->require_subcommand(1);
  std::string spec_file, idem_key, job_id, state_filter;
  auto* jobs_plan = jobs->add_subcommand("plan", "where a job spec would run now, and why");
  jobs_plan->add_option("-f,--file", spec_file, "job spec, YAML or JSON ('-' reads stdin)")
      ->required();
  auto* jobs_submit = jobs->add_subcommand("submit", "queue a job (durable when this returns)");
  jobs_submit->add_option("-f,--file", spec_file, "job spec, YAML or JSON ('-' reads stdin)")
      ->required();
  jobs_submit->add_option("--idempotency-key", idem_key,
                          "the same key returns the same job (default: a fresh one)");
  auto* jobs_get = jobs->add_subcommand("get", "one job, with its placement explanation");
  jobs_get->add_option("id", job_id, "job id")->required();
  auto* jobs_list = jobs->add_subcommand("list", "jobs you may see");
  jobs_list->add_option("--state", state_filter, "only jobs in this state");
  auto* jobs_cancel = jobs->add_subcommand("cancel", "cancel a job that has not ended");
  jobs_cancel->add_option("id", job_id, "job id")->required();
  uint32_t log_rank = 0;
  auto* jobs_logs = jobs->add_subcommand("logs", "a rank's raw output (any site, via the coordinator)");
  jobs_logs->add_option("id", job_id, "job id")->required();
  jobs_logs->add_option("--rank", log_rank, "rank (default 0)");
  auto* jobs_watch = jobs->add_subcommand("watch", "print state changes until the job ends");
  jobs_watch->add_option("id", job_id, "job id")->required();
  auto* vc = app.add_subcommand("vc", "virtual clusters");
  vc->require_subcommand(1);
  auto* vc_get = vc->add_subcommand("get", "rank -> site, node, GPU of a job's latest attempt");
  vc_get->add_option("job_id", job_id, "job id")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "fedctl: %s (see --help)\n", e.what());
    return 2;
  }
  const Format fmt = ParseFormat(g.output);

  if (init_ca->parsed()) {
    if (!fedgate::federation::IsValidName(federation)) {
      Die(fedgate::StrCat("invalid federation name \"", federation, "\" (want 1-63 of [a-z0-9-])"), 2);
    }
    auto st = fedgate::gateway::InitCa(ca_dir_init, federation, ca_days);
    if (!st.ok()) Die(std::string(st.message()));
    std::fprintf(stderr, "created CA for federation %s in %s\n", federation.c_str(),
                 ca_dir_init.c_str());
    return 0;
  }
  if (issue->parsed()) {
    auto fed = fedgate::gateway::CaFederation(ca_dir);
    if (!fed.ok()) Die(std::string(fed.status().message()));
    fedgate::gateway::Identity id;
    id.federation = *fed;
    if (!tenant.empty() || !user.empty()) {
      if (tenant.empty() || user.empty()) Die("a user certificate needs --tenant and --user", 2);
      if (!site.empty() || !role.empty()) Die("--tenant/--user exclude --site/--role", 2);
      id.role = fedgate::gateway::Role::kUser;
      id.tenant = tenant;
      id.name = user;
    } else {
      if (site.empty() || role.empty()) {
        Die("say --site and --role gateway|admin, or --tenant and --user", 2);
      }
      id.site = site;
      if (role == "gateway") {
        id.role = fedgate::gateway::Role::kGateway;
      } else if (role == "admin") {
        id.role = fedgate::gateway::Role::kAdmin;
        id.name = name.empty() ? "admin" : name;
      } else {
        Die(fedgate::StrCat("unknown role \"", role, "\" (want gateway or admin)"), 2);
      }
    }
    const std::string uri = id.ToUri();
    if (auto parsed = fedgate::gateway::ParseSpiffeId(uri); !parsed.ok()) {
      Die(std::string(parsed.status().message()), 2);
    }
    auto st = fedgate::gateway::IssueToDir(ca_dir, out_dir, uri, dns, ips, leaf_days);
    if (!st.ok()) Die(std::string(st.message()));
    std::fprintf(stderr, "issued %s into %s\n", uri.c_str(), out_dir.c_str());
    return 0;
  }

  v1::JobSpec spec_in;
  if (jobs_plan->parsed() || jobs_submit->parsed()) {
    // Read and check the spec before dialing anything.
    std::string text;
    if (spec_file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), {});
    } else {
      auto t = fedgate::gateway::ReadFile(spec_file);
      if (!t.ok()) Die(std::string(t.status().message()), 2);
      text = *t;
    }
    auto parsed = fedgate::gateway::ParseJobSpec(text, spec_file == "-" ? "stdin" : spec_file);
    if (!parsed.ok()) Die(std::string(parsed.status().message()), 2);
    spec_in = *parsed;
  }

  auto channel = Connect(g);
  auto admin = fedgate::v1::AdminService::NewStub(channel);
  if (peers_list->parsed()) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::ListPeersResponse resp;
    CheckRpc(admin->ListPeers(&ctx, {}, &resp), g, "peers list");
    Print(resp, fmt, PeersTable(resp));
  } else if (peers_add->parsed()) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::AddPeerRequest req;
    req.set_site(peer_site);
    req.set_endpoint(peer_endpoint);
    fedgate::v1::AddPeerResponse resp;
    CheckRpc(admin->AddPeer(&ctx, req, &resp), g, "peers add");
    fedgate::v1::ListPeersResponse one;
    *one.add_peers() = resp.peer();
    Print(resp, fmt, PeersTable(one));
  } else if (peers_remove->parsed()) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::RemovePeerRequest req;
    req.set_site(peer_site);
    fedgate::v1::RemovePeerResponse resp;
    CheckRpc(admin->RemovePeer(&ctx, req, &resp), g, "peers remove");
    Print(resp, fmt, fedgate::StrCat("removed peer ", peer_site, "\n"));
  } else if (jobs_submit->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    fedgate::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec_in;
    req.set_idempotency_key(idem_key.empty() ? fedgate::gateway::RandomToken() : idem_key);
    fedgate::v1::SubmitJobResponse resp;
    // Retrying with the same key is safe: it can never make a second job.
    grpc::Status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      st = stub->Submit(&ctx, req, &resp);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
    }
    CheckRpc(st, g, "jobs submit");
    Print(resp, fmt, JobTable(resp.job()));
  } else if (jobs_get->parsed() || jobs_cancel->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    if (jobs_get->parsed()) {
      fedgate::v1::GetJobRequest req;
      req.set_id(job_id);
      fedgate::v1::GetJobResponse resp;
      CheckRpc(stub->Get(&ctx, req, &resp), g, "jobs get");
      Print(resp, fmt, JobTable(resp.job()));
    } else {
      fedgate::v1::CancelJobRequest req;
      req.set_id(job_id);
      fedgate::v1::CancelJobResponse resp;
      CheckRpc(stub->Cancel(&ctx, req, &resp), g, "jobs cancel");
      Print(resp, fmt, JobTable(resp.job()));
    }
  } else if (jobs_logs->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    fedgate::v1::LogsRequest req;
    req.set_id(job_id);
    req.set_rank(log_rank);
    req.set_follow(true);  // until the job ends, then exit
    auto reader = stub->Logs(&ctx, req);
    fedgate::v1::LogsResponse chunk;
    while (reader->Read(&chunk)) {
      // Raw output whatever -o says.
      std::fwrite(chunk.content().data(), 1, chunk.content().size(), stdout);
      std::fflush(stdout);
    }
    CheckRpc(reader->Finish(), g, "jobs logs");
  } else if (jobs_watch->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    fedgate::v1::WatchJobRequest req;
    req.set_id(job_id);
    auto reader = stub->Watch(&ctx, req);
    fedgate::v1::Job j;
    std::string final_state;
    while (reader->Read(&j)) {
      if (fmt == Format::kTable) {
        std::printf("%s (attempt %u): %s\n", j.state().c_str(), j.attempt(), j.reason().c_str());
      } else {
        fedgate::v1::GetJobResponse one;
        *one.mutable_job() = j;
        Print(one, fmt, "");
      }
      std::fflush(stdout);
      final_state = j.state();
    }
    CheckRpc(reader->Finish(), g, "jobs watch");
    return final_state == "SUCCEEDED" ? 0 : 1;
  } else if (vc_get->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::GetJobRequest req;
    req.set_id(job_id);
    fedgate::v1::GetJobResponse resp;
    CheckRpc(stub->Get(&ctx, req, &resp), g, "vc get");
    const auto& j = resp.job();
    std::vector<std::vector<std::string>> rows;
    for (const auto& site : j.run().sites()) {
      for (const auto& r : site.ranks()) {
        rows.push_back({absl::StrCat(r.rank()), site.site(), r.node(), absl::StrCat(r.gpu()),
                        absl::StrCat(r.local_rank()), absl::StrCat(r.group_rank())});
      }
    }
    std::string table =
        rows.empty() ? std::string("no virtual cluster yet (the job has not started)\n")
                     : absl::StrFormat("world %u, master %s:%u, epoch %u\n", j.run().world_size(),
                                       j.run().master_addr(), j.run().master_port(),
                                       j.run().epoch()) +
                           fedgate::cli::RenderTable(
                               {"RANK", "SITE", "NODE", "GPU", "LOCAL RANK", "GROUP"}, rows);
    Print(j.run(), fmt, table);
  } else if (jobs_list->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    fedgate::v1::ListJobsResponse all;
    std::string token;
    do {
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      fedgate::v1::ListJobsRequest req;
      req.set_state(state_filter);
      req.set_page_token(token);
      req.set_page_size(500);
      fedgate::v1::ListJobsResponse page;
      CheckRpc(stub->List(&ctx, req, &page), g, "jobs list");
      for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
      token = page.next_page_token();
    } while (!token.empty());
    std::vector<std::vector<std::string>> rows;
    for (const auto& j : all.jobs()) {
      rows.push_back({j.id(), j.name(), j.tenant(), j.state(), absl::StrCat(j.spec().gpus()),
                      j.reason()});
    }
    Print(all, fmt,
          rows.empty() ? std::string("no jobs\n")
                       : fedgate::cli::RenderTable({"ID", "NAME", "TENANT", "STATE", "GPUS", "REASON"},
                                                   rows));
  } else if (jobs_plan->parsed()) {
    auto stub = fedgate::v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::PlanRequest req;
    *req.mutable_spec() = spec_in;
    fedgate::v1::PlanResponse resp;
    CheckRpc(stub->Plan(&ctx, req, &resp), g, "jobs plan");
    Print(resp, fmt, PlanTable(resp));
  } else if (links_probe->parsed()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    fedgate::v1::ProbeLinkRequest req;
    req.set_site(probe_site);
    fedgate::v1::ProbeLinkResponse resp;
    std::fprintf(stderr, "probing the link to %s ...\n", probe_site.c_str());
    CheckRpc(admin->ProbeLink(&ctx, req, &resp), g, "links probe");
    fedgate::v1::ListLinksResponse one;
    *one.add_links() = resp.link();
    Print(resp, fmt, LinksTable(one));
  } else if (links->parsed()) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::ListLinksResponse resp;
    CheckRpc(admin->ListLinks(&ctx, {}, &resp), g, "links");
    Print(resp, fmt, LinksTable(resp));
  } else if (capacity->parsed()) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    fedgate::v1::GetCapacityResponse resp;
    CheckRpc(admin->GetCapacity(&ctx, {}, &resp), g, "capacity");
    Print(resp, fmt, CapacityTable(resp));
  }
  return 0;
}
