#include "federation/world_restart.h"

#include <algorithm>

#include "base/str_cat.h"
#include "federation/duration.h"
#include "federation/round_verdict.h"

namespace fedgate::federation {

using SliceState = v1::SliceStatusResponse;
using Stage = v1::Replacement;

SliceStand StandOf(const absl::StatusOr<v1::SliceStatusResponse>& a, int64_t silent_ms,
                   int64_t lease_ms) {
  if (!a.ok()) return silent_ms > lease_ms ? SliceStand::kLost : SliceStand::kSilent;
  if (!a->preempted_by().empty()) return SliceStand::kPreempted;
  if (a->parked()) return SliceStand::kReady;
  if (a->held()) return SliceStand::kStopping;
  switch (a->state()) {
    case SliceState::RUNNING:
      return SliceStand::kRunning;
    case SliceState::SUCCEEDED:
      return SliceStand::kSucceeded;
    case SliceState::HELD:
      return SliceStand::kUnsent;
    default:
      return SliceStand::kLost;  // FAILED with its GPUs freed, or UNKNOWN
  }
}

namespace {

bool Has(const google::protobuf::RepeatedPtrField<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// Why a site's slice needs the world to restart, for the job's reason.
std::string WhyOf(const std::string& site, const absl::StatusOr<v1::SliceStatusResponse>& a,
                  SliceStand stand) {
  if (!a.ok()) return StrCat("site ", site, " unreachable");
  if (a->state() == SliceState::UNKNOWN) return StrCat("site ", site, " lost the slice");
  std::string codes;
  for (const auto& [rank, code] : a->exit_codes()) {
    if (code != 0) codes += StrCat(codes.empty() ? "" : ", ", "rank ", rank, " exit ", code);
  }
  if (stand == SliceStand::kLost) return StrCat("site ", site, ": ", a->message());
  return StrCat("site ", site, ": ", a->message(), codes.empty() ? "" : StrCat(" (", codes, ")"));
}

void SetStage(v1::RunPlan* run, Stage::Stage stage, WorldVerdict* v) {
  if (run->replacing().stage() == stage) return;
  run->mutable_replacing()->set_stage(stage);
  v->changed = true;
}

// Stage checkpoint: the newest step any ready site holds must be at every
// site of the new world; the fastest holder copies it to those that lack it.
void PlanCheckpoint(const v1::RunPlan& run,
                    const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                    const std::function<double(const std::string&, const std::string&)>& gbps,
                    WorldVerdict* v, v1::RunPlan* out) {
  uint64_t newest = 0;
  for (int i = 0; i < run.sites_size(); ++i) {
    if (answers[i].ok() && answers[i]->checkpoint_steps_size() > 0) {
      const auto& steps = answers[i]->checkpoint_steps();
      newest = std::max(newest, *std::max_element(steps.begin(), steps.end()));
    }
  }
  if (out->replacing().checkpoint_step() != newest) {
    out->mutable_replacing()->set_checkpoint_step(newest);
    v->changed = true;
  }
  std::vector<std::string> holders, lacking;
  for (int i = 0; i < run.sites_size(); ++i) {
    const auto& steps = answers[i]->checkpoint_steps();
    const bool has = std::find(steps.begin(), steps.end(), newest) != steps.end();
    (has ? holders : lacking).push_back(run.sites(i).site());
  }
  if (newest == 0 || lacking.empty()) {
    SetStage(out, Stage::RELAUNCH, v);
    return;
  }
  for (const auto& to : lacking) {
    std::string best = holders.front();
    for (const auto& h : holders) {
      if (gbps(h, to) > gbps(best, to)) best = h;
    }
    v->copy_to[best].push_back(to);
  }
}

}  // namespace

std::string ReplacingStatus(const v1::RunPlan& run) {
  const auto& r = run.replacing();
  std::string what = r.lost_sites().empty()
                         ? StrCat("restarting the world (", r.why(), ")")
                         : StrCat("replacing slice of ", r.lost_sites(0),
                                  r.lost_sites_size() > 1 ? " and others" : "", " (", r.why(), ")");
  switch (r.stage()) {
    case Stage::STOPPING:
      return StrCat(what, ": stopping the other ranks, GPUs kept");
    case Stage::RESERVING:
      return StrCat(what, ": reserving a replacement slice");
    case Stage::CHECKPOINT:
      return StrCat(what, ": copying checkpoint step-", r.checkpoint_step(),
                    " to every site of the new world");
    default:
      return StrCat(what, ": starting world ", run.restart() + 1);
  }
}

namespace {

// Before any restart: the world succeeded, runs on, or lost a slice (then
// `replacing` starts, or the job falls back when it used its replacements).
// True when the verdict is final.
bool JudgeRunningWorld(const v1::JobSpec& spec, int64_t now_ms,
                       const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                       const std::vector<SliceStand>& stand, v1::RunPlan* run, WorldVerdict* v) {
  int succeeded = 0, first_problem = -1;
  for (int i = 0; i < run->sites_size(); ++i) {
    if (stand[i] == SliceStand::kSucceeded) ++succeeded;
    if (stand[i] == SliceStand::kUnsent) v->recommit.push_back(i);
    const bool problem = stand[i] == SliceStand::kLost || stand[i] == SliceStand::kStopping ||
                         stand[i] == SliceStand::kReady;
    if (problem && first_problem < 0) first_problem = i;
  }
  if (succeeded == run->sites_size()) {
    v->kind = WorldVerdict::kSucceeded;
    v->reason =
        StrCat("all ", run->world_size(), " rank(s) exited 0 on ", run->sites_size(), " site(s)",
               run->restart() > 0 ? StrCat(" after ", run->restart(), " world restart(s)") : "");
    return true;
  }
  if (first_problem < 0) return true;
  const std::string& site = run->sites(first_problem).site();
  const std::string why = WhyOf(site, answers[first_problem], stand[first_problem]);
  if (run->restart() >= spec.max_replacements()) {
    v->kind = WorldVerdict::kFallBack;
    v->reason = StrCat(why, "; the job used its ", spec.max_replacements(), " replacement(s)");
    if (stand[first_problem] == SliceStand::kLost) v->bad_site = site;
    return true;
  }
  auto* r = run->mutable_replacing();
  r->set_stage(Stage::STOPPING);
  r->set_why(why);
  r->set_since_unix_ms(now_ms);
  v->changed = true;
  return false;
}

}  // namespace

WorldVerdict JudgeWorld(const v1::JobSpec& spec, int64_t now_ms, int64_t lease_ms,
                        int64_t replace_timeout_ms,
                        const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers,
                        std::map<std::string, int64_t>* last_ok,
                        const std::function<double(const std::string&, const std::string&)>& gbps,
                        v1::RunPlan* run) {
  WorldVerdict v;
  if (QuotaOnly(*run) && answers.size() > static_cast<size_t>(run->sites_size()) &&
      answers.back().ok() && answers.back()->state() == SliceState::UNKNOWN) {
    v.kind = WorldVerdict::kFallBack;
    v.reason = StrCat("the quota hold at home site ", run->quota_site(), " was lost");
    return v;
  }
  std::vector<SliceStand> stand(run->sites_size());
  for (int i = 0; i < run->sites_size(); ++i) {
    int64_t& seen = last_ok->try_emplace(run->sites(i).site(), now_ms).first->second;
    if (answers[i].ok()) {
      v.worst_gap_ms = std::max(v.worst_gap_ms, now_ms - seen);
      seen = now_ms;
    }
    stand[i] = StandOf(answers[i], now_ms - seen, lease_ms);
    if (stand[i] == SliceStand::kPreempted) {
      v.kind = WorldVerdict::kPreempted;
      v.preempted_at = run->sites(i).site();
      v.preempted_by = answers[i]->preempted_by();
      return v;
    }
  }
  if (!run->has_replacing() && JudgeRunningWorld(spec, now_ms, answers, stand, run, &v)) return v;
  auto* r = run->mutable_replacing();
  if (now_ms - r->since_unix_ms() > replace_timeout_ms) {
    v.kind = WorldVerdict::kFallBack;
    v.reason = StrCat(ReplacingStatus(*run), ": not done within jobs.replace_timeout");
    return v;
  }
  bool pending = false;
  for (int i = 0; i < run->sites_size(); ++i) {
    const std::string& site = run->sites(i).site();
    switch (stand[i]) {
      case SliceStand::kRunning:
        v.halt.push_back(i);
        pending = true;
        break;
      case SliceStand::kStopping:
      case SliceStand::kSilent:
      case SliceStand::kUnsent:
        pending = true;
        break;
      case SliceStand::kSucceeded:  // its GPUs are free: as good as lost
      case SliceStand::kLost:
        if (!Has(r->lost_sites(), site)) {
          r->add_lost_sites(site);
          if (r->stage() != Stage::STOPPING) SetStage(run, Stage::RESERVING, &v);
          v.changed = true;
        }
        break;
      default:
        break;
    }
  }
  if (r->stage() == Stage::STOPPING && !pending) {
    SetStage(run,
             r->lost_sites_size() > 0 ? Stage::RESERVING
             : spec.has_checkpoint()  ? Stage::CHECKPOINT
                                      : Stage::RELAUNCH,
             &v);
  }
  if (r->stage() == Stage::CHECKPOINT && !pending) PlanCheckpoint(*run, answers, gbps, &v, run);
  v.wake_placer = !pending && (r->stage() == Stage::RESERVING || r->stage() == Stage::RELAUNCH);
  v.status = ReplacingStatus(*run);
  return v;
}

v1::SiteRun ReplacementSite(const v1::SiteRun& lost, const v1::PlanResponse& plan,
                            const v1::PrepareResponse& held, uint64_t epoch) {
  std::vector<v1::RankLaunch> ranks(lost.ranks().begin(), lost.ranks().end());
  std::sort(ranks.begin(), ranks.end(),
            [](const auto& a, const auto& b) { return a.rank() < b.rank(); });
  v1::SiteRun out;
  out.set_site(plan.sites(0));
  out.set_epoch(epoch);
  std::map<std::string, std::vector<uint32_t>> gpus;
  for (const auto& h : held.holds()) gpus[h.node()].assign(h.indices().begin(), h.indices().end());
  size_t k = 0;
  uint32_t group = ranks.empty() ? 0 : ranks.front().group_rank();
  for (int s = 0; s < plan.slices_size(); ++s, ++group) {
    const auto& sl = plan.slices(s);
    const auto& on_node = gpus[sl.node()];
    for (uint32_t g = 0; g < sl.gpus() && k < ranks.size(); ++g, ++k) {
      v1::RankLaunch r = ranks[k];
      r.set_local_rank(g);
      r.set_local_world_size(sl.gpus());
      r.set_group_rank(group);
      r.set_node(sl.node());
      r.set_gpu(g < on_node.size() ? on_node[g] : 0);
      *out.add_ranks() = r;
    }
  }
  return out;
}

}  // namespace fedgate::federation
