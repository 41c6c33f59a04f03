#include "federation/round_verdict.h"

#include <set>

#include "base/str_cat.h"
#include "federation/duration.h"

namespace fedgate::federation {

using SliceState = v1::SliceStatusResponse;

absl::Status CheckHolds(const v1::PrepareRequest& req, const v1::PrepareResponse& resp) {
  std::map<std::string, uint32_t> asked;
  for (const auto& n : req.nodes()) asked[n.node()] += n.gpus();
  std::map<std::string, std::set<uint32_t>> got;
  for (const auto& h : resp.holds()) {
    for (uint32_t i : h.indices()) {
      if (!got[h.node()].insert(i).second) {
        return absl::InternalError(StrCat("GPU ", h.node(), "/", i, " returned twice"));
      }
    }
  }
  for (const auto& [node, n] : asked) {
    if (got[node].size() != n) {
      return absl::InternalError(
          StrCat("returned ", got[node].size(), " GPU(s) of node ", node, ", ", n, " asked"));
    }
  }
  if (got.size() != asked.size()) return absl::InternalError("returned GPUs of nodes not asked");
  return absl::OkStatus();
}

bool PastTimeLimit(const v1::JobSpec& spec, const v1::RunPlan& run, int64_t now_ms) {
  // The hard time_limit, from the reservation's epoch (when it was placed).
  auto limit = ParseDurationMs(spec.time_limit());
  return limit.ok() && !spec.time_limit().empty() &&
         now_ms - static_cast<int64_t>(run.epoch()) > *limit;
}

bool QuotaOnly(const v1::RunPlan& run) {
  if (run.quota_site().empty()) return false;
  for (const auto& s : run.sites()) {
    if (s.site() == run.quota_site()) return false;
  }
  return true;
}

PrepareVerdict JudgePrepare(const std::vector<v1::PrepareRequest>& reqs,
                            const std::vector<absl::StatusOr<v1::PrepareResponse>>& answers,
                            int quota_index, const std::string& quota_site, v1::RunPlan* run) {
  const int n = run->sites_size();
  const int calls = static_cast<int>(answers.size());
  PrepareVerdict v;
  for (int i = 0; i < calls && v.failed.empty(); ++i) {
    const std::string msg(answers[i].status().message());
    if (msg.rfind("waiting for quota", 0) == 0) v.failed = msg;
    if (msg.rfind("preempting", 0) == 0) {
      v.failed = StrCat("preempting at ", i < n ? run->sites(i).site() : quota_site, ": ", msg);
    }
  }
  if (quota_index >= 0 && quota_index < calls && answers[quota_index].ok()) {
    run->set_borrowed(answers[quota_index]->quota_class() == "borrowed");
  }
  if (calls > n && v.failed.empty() && !answers[n].ok()) {
    v.failed = StrCat("quota at home site ", quota_site, ": ", answers[n].status().message());
  }
  for (int i = 0; i < n && v.failed.empty(); ++i) {
    auto& site = *run->mutable_sites(i);
    absl::Status st = answers[i].status();
    if (st.ok()) st = CheckHolds(reqs[i], *answers[i]);
    if (!st.ok()) {
      v.failed = StrCat("reservation failed at ", site.site(), ": ", st.message(), "; will retry");
      break;
    }
    if (i == 0) run->set_master_port(answers[i]->master_port());
    std::map<std::string, std::vector<uint32_t>> gpus;
    for (const auto& h : answers[i]->holds()) {
      gpus[h.node()].insert(gpus[h.node()].end(), h.indices().begin(), h.indices().end());
    }
    std::map<std::string, size_t> used;
    for (auto& r : *site.mutable_ranks()) r.set_gpu(gpus[r.node()][used[r.node()]++]);
  }
  return v;
}

namespace {

RenewVerdict Failed(std::string reason, std::string bad_site = "") {
  RenewVerdict v;
  v.kind = RenewVerdict::kFailed;
  v.reason = std::move(reason);
  v.bad_site = std::move(bad_site);
  return v;
}

// A slice that failed or was lost: ranks that exited non-zero, a slice
// stopped by its lease, or one lost in a gateway restart say nothing
// against the site (only a silent site is avoided next time).
RenewVerdict SliceFailed(const std::string& site, const SliceState& st) {
  std::string codes;
  for (const auto& [rank, code] : st.exit_codes()) {
    if (code != 0) codes += StrCat(codes.empty() ? "" : ", ", "rank ", rank, " exit ", code);
  }
  const bool lost = st.state() == SliceState::UNKNOWN;
  return Failed(StrCat("site ", site, ": ", lost ? "lost the slice (gateway restarted?)" : "",
                       st.message(), codes.empty() ? "" : StrCat(" (", codes, ")")));
}

}  // namespace

RenewVerdict JudgeRenewal(const v1::JobSpec& spec, uint32_t attempt, const v1::RunPlan& run,
                          const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                          int64_t now_ms, int64_t lease_ms,
                          std::map<std::string, int64_t>* last_ok) {
  RenewVerdict v;
  if (PastTimeLimit(spec, run, now_ms)) {
    v.kind = RenewVerdict::kTimeLimit;
    v.reason = StrCat("stopped: attempt ", attempt, " ran past its time_limit of ", spec.time_limit());
    return v;
  }
  // The home site's quota hold, when it runs no ranks: it only has to stay
  // held. A home site that is down keeps it (restored at its restart); one
  // that says it is gone means the job runs without quota: run it again.
  if (QuotaOnly(run) && answers.size() > static_cast<size_t>(run.sites_size())) {
    const auto& q = answers.back();
    if (q.ok() && q->state() == SliceState::UNKNOWN) {
      return Failed(StrCat("the quota hold at home site ", run.quota_site(), " was lost"));
    }
    v.recommit_quota = q.ok() && q->state() == SliceState::HELD;
  }
  int succeeded = 0;
  for (int i = 0; i < run.sites_size(); ++i) {
    const std::string& site = run.sites(i).site();
    int64_t& seen = last_ok->try_emplace(site, now_ms).first->second;
    const auto& st = answers[i];
    if (!st.ok()) {
      if (now_ms - seen > lease_ms) {
        return Failed(StrCat("site ", site, " silent for ", (now_ms - seen) / 1000,
                             " s: ", st.status().message()),
                      site);
      }
      continue;
    }
    v.worst_gap_ms = std::max(v.worst_gap_ms, now_ms - seen);
    seen = now_ms;
    const auto state = st->state();
    if (state == SliceState::HELD) {
      // The decision is durable but this site never got its commit (the
      // coordinator restarted in between): re-drive it.
      v.recommit.push_back(i);
    } else if (state == SliceState::SUCCEEDED) {
      ++succeeded;
    } else if (state == SliceState::FAILED && !st->preempted_by().empty()) {
      RenewVerdict p;
      p.kind = RenewVerdict::kPreempted;
      p.preempted_at = site;
      p.preempted_by = st->preempted_by();
      return p;
    } else if (state == SliceState::FAILED || state == SliceState::UNKNOWN) {
      return SliceFailed(site, *st);
    }
  }
  if (succeeded == run.sites_size()) {
    v.kind = RenewVerdict::kSucceeded;
    v.reason = StrCat("all ", run.world_size(), " rank(s) exited 0 on ", run.sites_size(),
                      " site(s)");
  }
  return v;
}

}  // namespace fedgate::federation
