// fedctl jobs plan | submit | get | list | cancel | logs | watch | events, and vc get:
// a tenant's jobs through the federated job API.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/str_cat.h"
#include "fedgate/v1/jobs.grpc.pb.h"
#include "federation/names.h"
#include "gateway/cli/command.h"
#include "gateway/jobs/job_spec_yaml.h"
#include "gateway/peering/bench_host.h"
#include "gateway/security/certs.h"

namespace fedgate::cli {
namespace {

std::string PlanTable(const v1::PlanResponse& resp) {
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
    out += RenderTable({"RANKS", "SITE", "NODE", "GPUS"}, rows) + "\n";
  }
  std::vector<std::vector<std::string>> why;
  for (const auto& e : resp.explanation()) {
    why.push_back({e.site(), e.used() ? "yes" : "no", e.reason()});
  }
  return out + RenderTable({"SITE", "USED", "WHY"}, why);
}

// "; coordinated by X at term N" ("" from a gateway that does not say).
std::string Coordination(const v1::Job& j) {
  if (j.coordinator().empty()) return "";
  return absl::StrFormat("; coordinated by %s at term %u", j.coordinator(), j.term());
}

// The members once they are listed (after a takeover or a change of
// members), and the change under way.
std::string Members(const v1::RunPlan& run) {
  if (run.members().empty()) return "";
  std::string out = "; members: " + absl::StrJoin(run.members(), ", ");
  if (run.has_member_change()) {
    const auto& c = run.member_change();
    out += absl::StrFormat(" (changing: %s %s)", c.site(), c.remove() ? "leaves" : "joins");
  }
  return out;
}

std::string JobTable(const v1::Job& j) {
  std::string out = absl::StrFormat("job %s (%s) of tenant %s: %s, attempt %u%s\n  %s\n", j.id(),
                                    j.name(), j.tenant(), v1::Job::State_Name(j.state()),
                                    j.attempt(), Coordination(j), j.reason());
  if (j.has_placement() && j.placement().explanation_size() > 0) {
    out += "\n" + PlanTable(j.placement());
  }
  return out;
}

// Reads and checks a spec file ('-' = stdin) before anything is dialled.
v1::JobSpec ReadSpec(const std::string& file) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    auto t = gateway::ReadFile(file);
    if (!t.ok()) Die(std::string(t.status().message()), 2);
    text = *t;
  }
  auto parsed = gateway::ParseJobSpec(text, file == "-" ? "stdin" : file);
  if (!parsed.ok()) Die(std::string(parsed.status().message()), 2);
  return *parsed;
}

// Where a job command about `id` goes: the gateway given, or, when that one
// answers for a job coordinated elsewhere (it keeps a copy of the record,
// or the job moved away from it) and says where the coordinator is, the
// coordinator's gateway, pinned to its site. `local` is the first answer.
struct Followed {
  Globals g;
  bool moved = false;
  v1::GetJobResponse local;
};

Followed Follow(const Globals& g, const std::string& id) {
  Followed f;
  f.g = g;
  if (!g.follow) return f;
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetJobRequest req;
  req.set_id(id);
  if (!stub->Get(&ctx, req, &f.local).ok()) return f;  // the command itself says why
  const auto& md = ctx.GetServerTrailingMetadata();
  const auto site = md.find("fedgate-coordinator"), at = md.find("fedgate-coordinator-endpoint");
  if (site == md.end() || at == md.end()) return f;
  const std::string s(site->second.data(), site->second.size());
  const std::string e(at->second.data(), at->second.size());
  if (!federation::IsValidName(s) || e.empty() || e.size() > 300) return f;
  std::fprintf(stderr, "fedctl: job %s is coordinated by %s; asking its gateway at %s\n",
               id.c_str(), s.c_str(), e.c_str());
  f.g.site = s;
  f.g.gateway = e;
  f.moved = true;
  return f;
}

struct Opts {
  std::string spec_file, idem_key, job_id, state;
  uint32_t rank = 0;
};

int Plan(const Globals& g, const Opts& o) {
  const v1::JobSpec spec = ReadSpec(o.spec_file);
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::PlanRequest req;
  *req.mutable_spec() = spec;
  v1::PlanResponse resp;
  CheckRpc(stub->Plan(&ctx, req, &resp), g, "jobs plan");
  Print(resp, g.format(), PlanTable(resp));
  return 0;
}

int Submit(const Globals& g, const Opts& o) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = ReadSpec(o.spec_file);
  req.set_idempotency_key(o.idem_key.empty() ? gateway::RandomToken() : o.idem_key);
  auto stub = v1::JobService::NewStub(Connect(g));
  v1::SubmitJobResponse resp;
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
  Print(resp, g.format(), JobTable(resp.job()));
  return 0;
}

int Get(const Globals& given, const Opts& o) {
  const Followed f = Follow(given, o.job_id);
  const Globals& g = f.g;
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetJobRequest req;
  req.set_id(o.job_id);
  v1::GetJobResponse resp;
  const grpc::Status st = stub->Get(&ctx, req, &resp);
  if (!st.ok() && f.moved && (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                              st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
    // The coordinator is out of reach: the first gateway's view, said so.
    std::fprintf(stderr, "fedctl: %s is unreachable (%s); showing what the gateway asked keeps\n",
                 g.site.c_str(), st.error_message().c_str());
    Print(f.local, g.format(), JobTable(f.local.job()));
    return 0;
  }
  CheckRpc(st, g, "jobs get");
  Print(resp, g.format(), JobTable(resp.job()));
  return 0;
}

int Cancel(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CancelJobRequest req;
  req.set_id(o.job_id);
  v1::CancelJobResponse resp;
  CheckRpc(stub->Cancel(&ctx, req, &resp), g, "jobs cancel");
  Print(resp, g.format(), JobTable(resp.job()));
  return 0;
}

int List(const Globals& g, const Opts& o) {
  v1::Job::State state = v1::Job::STATE_UNSPECIFIED;
  if (!o.state.empty() &&
      (!v1::Job::State_Parse(o.state, &state) || state == v1::Job::STATE_UNSPECIFIED)) {
    Die(StrCat("unknown state \"", o.state,
               "\" (want PENDING, RESERVING, RUNNING, SUCCEEDED, FAILED or CANCELLED)"),
        2);
  }
  auto stub = v1::JobService::NewStub(Connect(g));
  v1::ListJobsResponse all;
  std::string token;
  do {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ListJobsRequest req;
    req.set_state(state);
    req.set_page_token(token);
    req.set_page_size(500);
    v1::ListJobsResponse page;
    CheckRpc(stub->List(&ctx, req, &page), g, "jobs list");
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    token = page.next_page_token();
  } while (!token.empty());
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : all.jobs()) {
    // A service's replicas are jobs too; KIND says which is which.
    const std::string kind = j.spec().kind() == "service" ? "service"
                             : j.spec().service().empty() ? "job"
                                                          : "replica";
    rows.push_back({j.id(), j.name(), kind, j.tenant(), v1::Job::State_Name(j.state()),
                    absl::StrCat(j.spec().gpus()), j.reason()});
  }
  Print(all, g.format(),
        rows.empty() ? std::string("no jobs\n")
                     : RenderTable({"ID", "NAME", "KIND", "TENANT", "STATE", "GPUS", "REASON"}, rows));
  return 0;
}

int Logs(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  v1::LogsRequest req;
  req.set_id(o.job_id);
  req.set_rank(o.rank);
  req.set_follow(true);  // until the job ends, then exit
  auto reader = stub->Logs(&ctx, req);
  v1::LogsResponse chunk;
  while (reader->Read(&chunk)) {
    // Raw output whatever -o says.
    std::fwrite(chunk.content().data(), 1, chunk.content().size(), stdout);
    std::fflush(stdout);
  }
  CheckRpc(reader->Finish(), g, "jobs logs");
  return 0;
}

std::string EventLine(const v1::JobEvent& e) {
  return absl::StrFormat("%s  %-18s %-14s %s\n", e.time(), e.type(),
                         e.site().empty() ? "-" : e.site(), e.message());
}

// The job's events after `*after` (fetched through the same stub).
absl::StatusOr<v1::JobEventsResponse> FetchEvents(v1::JobService::Stub* stub,
                                                  const std::string& id, uint64_t after) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::JobEventsRequest req;
  req.set_id(id);
  req.set_after_seq(after);
  v1::JobEventsResponse resp;
  auto st = stub->Events(&ctx, req, &resp);
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  return resp;
}

int Events(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::JobEventsRequest req;
  req.set_id(o.job_id);
  v1::JobEventsResponse resp;
  CheckRpc(stub->Events(&ctx, req, &resp), g, "jobs events");
  std::string table = absl::StrFormat("%-24s  %-18s %-14s %s\n", "TIME", "TYPE", "SITE", "MESSAGE");
  for (const auto& e : resp.events()) table += EventLine(e);
  Print(resp, g.format(), table);
  return 0;
}

int Watch(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id(o.job_id);
  auto reader = stub->Watch(&ctx, req);
  v1::Job j;
  v1::Job::State final_state = v1::Job::STATE_UNSPECIFIED;
  uint64_t seen = 0;  // the last event printed
  while (reader->Read(&j)) {
    if (g.format() == Format::kTable) {
      std::printf("%s (attempt %u): %s\n", v1::Job::State_Name(j.state()).c_str(), j.attempt(),
                  j.reason().c_str());
      // Every write of the job wakes the watch; the story told since follows.
      if (auto ev = FetchEvents(stub.get(), o.job_id, seen); ev.ok()) {
        for (const auto& e : ev->events()) {
          std::printf("  %s", EventLine(e).c_str());
          seen = e.seq();
        }
      }
    } else {
      v1::GetJobResponse one;
      *one.mutable_job() = j;
      Print(one, g.format(), "");
    }
    std::fflush(stdout);
    final_state = j.state();
  }
  CheckRpc(reader->Finish(), g, "jobs watch");
  return final_state == v1::Job::SUCCEEDED ? 0 : 1;
}

int VcGet(const Globals& g, const Opts& o) {
  auto stub = v1::JobService::NewStub(Connect(g));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetJobRequest req;
  req.set_id(o.job_id);
  v1::GetJobResponse resp;
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
                   : absl::StrFormat("world %u, master %s:%u, epoch %u, restart %u%s%s; "
                                     "witnesses: %s%s\n",
                                     j.run().world_size(), j.run().master_addr(),
                                     j.run().master_port(), j.run().epoch(), j.run().restart(),
                                     j.run().has_replacing() ? " (restarting)" : "",
                                     Coordination(j),
                                     j.run().witnesses().empty()
                                         ? std::string("none")
                                         : absl::StrJoin(j.run().witnesses(), ", "),
                                     Members(j.run())) +
                         RenderTable({"RANK", "SITE", "NODE", "GPU", "LOCAL RANK", "GROUP"}, rows);
  Print(j.run(), g.format(), table);
  return 0;
}

}  // namespace

void AddJobsCommands(CLI::App& app, Commands* out) {
  auto o = std::make_shared<Opts>();
  auto add = [&](CLI::App* sub, int (*fn)(const Globals&, const Opts&)) {
    out->push_back({sub, [o, fn](const Globals& g) { return fn(g, *o); }});
  };
  // Commands about one job go on to its coordinator (Follow).
  auto add_followed = [&](CLI::App* sub, int (*fn)(const Globals&, const Opts&)) {
    out->push_back({sub, [o, fn](const Globals& g) { return fn(Follow(g, o->job_id).g, *o); }});
  };
  auto* jobs = app.add_subcommand("jobs", "federated jobs");
  jobs->require_subcommand(1);
  auto* plan = jobs->add_subcommand("plan", "where a job spec would run now, and why");
  plan->add_option("-f,--file", o->spec_file, "job spec, YAML or JSON ('-' reads stdin)")
      ->required();
  add(plan, Plan);
  auto* submit = jobs->add_subcommand("submit", "queue a job (durable when this returns)");
  submit->add_option("-f,--file", o->spec_file, "job spec, YAML or JSON ('-' reads stdin)")
      ->required();
  submit->add_option("--idempotency-key", o->idem_key,
                     "the same key returns the same job (default: a fresh one)");
  add(submit, Submit);
  auto* get = jobs->add_subcommand("get", "one job, with its placement explanation");
  get->add_option("id", o->job_id, "job id")->required();
  add(get, Get);
  auto* list = jobs->add_subcommand("list", "jobs you may see");
  list->add_option("--state", o->state, "only jobs in this state");
  add(list, List);
  auto* cancel = jobs->add_subcommand("cancel", "cancel a job that has not ended");
  cancel->add_option("id", o->job_id, "job id")->required();
  add_followed(cancel, Cancel);
  auto* logs = jobs->add_subcommand("logs", "a rank's raw output (any site, via the coordinator)");
  logs->add_option("id", o->job_id, "job id")->required();
  logs->add_option("--rank", o->rank, "rank (default 0)");
  add_followed(logs, Logs);
  auto* watch = jobs->add_subcommand("watch", "print state changes until the job ends");
  watch->add_option("id", o->job_id, "job id")->required();
  add_followed(watch, Watch);
  auto* events = jobs->add_subcommand("events", "the job's story: placed, staging, started, ...");
  events->add_option("id", o->job_id, "job id")->required();
  add_followed(events, Events);

  auto* vc = app.add_subcommand("vc", "virtual clusters");
  vc->require_subcommand(1);
  auto* vc_get = vc->add_subcommand("get", "rank -> site, node, GPU of a job's latest attempt");
  vc_get->add_option("job_id", o->job_id, "job id")->required();
  add_followed(vc_get, VcGet);
}

}  // namespace fedgate::cli
