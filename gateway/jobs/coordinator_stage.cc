// Staging in the reservation round: once every site holds its GPUs, sites
// chosen without the job's datasets pull them from holders (fastest
// measured link first) before anything is committed. Each ask keeps their
// holds alive; the job says how far staging got; a copy that fails or makes
// no progress for the stall time fails the reservation with the reason, and
// no rank ever starts on a partial copy.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "base/str_cat.h"
#include "federation/dataset.h"
#include "federation/world_restart.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/coordinator_key.h"
#include "gateway/jobs/fan_out.h"
#include "gateway/jobs/job_story.h"
#include "gateway/jobs/participant_calls.h"
#include "gateway/peering/core.h"

namespace fedgate::gateway {
namespace {

constexpr int64_t kAskEveryMs = 1000;
constexpr int64_t kHoldWhileStagingMs = 30000;

}  // namespace

std::vector<Coordinator::StagePlan> Coordinator::StagingFor(const JobRecord& job,
                                                           const v1::RunPlan& run) {
  // The content of each dataset: the (name, digest) most sites hold.
  std::map<std::string, v1::DatasetHolding> chosen;
  const v1::ListDatasetsResponse holdings = core_->ListDatasets();
  for (const auto& h : holdings.datasets()) {
    auto it = chosen.find(h.name());
    if (it == chosen.end() || h.sites_size() > it->second.sites_size()) chosen[h.name()] = h;
  }
  std::map<std::pair<std::string, std::string>, double> gbps;
  const v1::ListLinksResponse links = core_->ListLinks();
  for (const auto& l : links.links()) gbps[{l.from(), l.to()}] = l.gbps();
  auto link = [&](const std::string& a, const std::string& b) {
    double best = 0;
    for (const auto& k : {std::pair{a, b}, std::pair{b, a}}) {
      if (auto it = gbps.find(k); it != gbps.end()) best = best == 0 ? it->second : std::min(best, it->second);
    }
    return best;
  };
  std::vector<StagePlan> out;
  for (int i = 0; i < run.sites_size(); ++i) {
    const std::string& site = run.sites(i).site();
    StagePlan p{site, federation::SiteEpoch(run, i), {}};
    for (const auto& name : job.spec.datasets()) {
      auto it = chosen.find(name);
      if (it == chosen.end()) continue;  // the participant refuses the commit, naming it
      const auto& h = it->second;
      if (std::find(h.sites().begin(), h.sites().end(), site) != h.sites().end()) continue;
      v1::StageItem item;
      item.set_name(name);
      item.set_digest(h.digest());
      item.set_bytes(h.bytes());
      std::vector<std::string> sources(h.sites().begin(), h.sites().end());
      std::stable_sort(sources.begin(), sources.end(), [&](const std::string& a, const std::string& b) {
        return link(a, site) > link(b, site);
      });
      for (auto& s : sources) item.add_sources(std::move(s));
      p.items.push_back(std::move(item));
    }
    if (!p.items.empty()) out.push_back(std::move(p));
  }
  return out;
}

std::vector<absl::StatusOr<v1::StageResponse>> Coordinator::AskStaging(
    const JobRecord& job, const std::vector<StagePlan>& plans) {
  std::vector<absl::StatusOr<v1::StageResponse>> answers(plans.size(),
                                                         absl::UnknownError("no answer"));
  FanOut fan;
  for (size_t i = 0; i < plans.size(); ++i) {
    v1::StageRequest req;
    *req.mutable_key() = Key(job, plans[i].epoch);
    for (const auto& item : plans[i].items) *req.add_items() = item;
    req.set_hold_ttl_ms(kHoldWhileStagingMs);
    participants_->Stage(plans[i].site, std::move(req), rpc_timeout_ms(), fan.Collect(&answers[i]));
  }
  fan.Wait();
  return answers;
}

std::string Coordinator::StageDatasets(JobRecord* job, const v1::RunPlan& run) {
  const auto plans = StagingFor(*job, run);
  if (plans.empty()) return "";
  const int64_t stall_ms = std::max<int64_t>(60000, 6 * lease_ms_);
  const int64_t start = core_->clock()->NowMs();
  int64_t progress_at = start;
  uint64_t last_done = 0;
  int last_step = -1;  // the last quarter told in the story
  for (const auto& p : plans) {
    for (const auto& item : p.items) {
      Tell(job->id, StoryEvent(start, "staging", p.site,
                               StrCat(federation::HumanBytes(item.bytes()), " of ", item.name(),
                                      " to stage from ", item.sources(0))));
    }
  }
  while (!stop_) {
    const auto answers = AskStaging(*job, plans);
    uint64_t done = 0, total = 0;
    bool all_done = true;
    std::string status;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (!answers[i].ok()) {
        all_done = false;  // a missed ask is not a failure; a stall is
        continue;
      }
      for (const auto& it : answers[i]->items()) {
        if (!it.error().empty()) {
          return StrCat("staging ", it.name(), " at ", plans[i].site, " failed: ", it.error());
        }
        done += it.bytes_done();
        total += it.bytes_total();
        if (!it.done()) {
          all_done = false;
          if (status.empty()) {
            status = StrCat(it.name(), " at ", plans[i].site);
          }
        }
      }
    }
    const int64_t now = core_->clock()->NowMs();
    if (done > last_done) {
      last_done = done;
      progress_at = now;
    }
    const double frac = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    if (all_done) {
      const double secs = std::max(0.001, (now - start) / 1000.0);
      Tell(job->id, StoryEvent(now, "staging", "",
                               StrCat("every dataset staged: ", federation::HumanBytes(total), " in ",
                                      federation::HumanSeconds(secs), " (",
                                      StrCat(static_cast<int>(total * 8 / secs / 1e6)), " Mbit/s)")));
      return "";
    }
    if (now - progress_at > stall_ms) {
      return StrCat("staging ", status, " stalled: no progress for ", (now - progress_at) / 1000,
                    " s");
    }
    const double rate = (now - start) > 0 ? static_cast<double>(done) / ((now - start) / 1000.0) : 0;
    const std::string eta = rate > 0 ? StrCat(", ETA ", federation::HumanSeconds((total - done) / rate)) : "";
    const std::string reason = StrCat("staging ", status, ", ", static_cast<int>(frac * 100), " %", eta);
    if (reason != job->reason) {
      job->reason = reason;
      job->updated_at_unix_ms = now;
      const int step = static_cast<int>(frac * 4);
      if (step > last_step && step > 0) {
        last_step = step;
        job->new_events.push_back(StoryEvent(now, "staging", "", reason));
      }
      if (!Save(job)) return "the job changed during staging (cancelled?)";
    }
    Sleep(kAskEveryMs);
  }
  return "the coordinator is stopping";
}

void Coordinator::StageThenCommit(JobRecord job, v1::RunPlan next) {
  JoinStaging(false);
  std::lock_guard lock(staging_mu_);
  Staging& s = staging_[job.id];
  s.thread = std::thread([this, job = std::move(job), next = std::move(next), ended = s.ended]() mutable {
    const std::string why = StageDatasets(&job, next);
    if (why.empty()) {
      DecideAndCommit(std::move(job), next);
    } else {
      if (on_reservation_end_) on_reservation_end_(false);
      job.run = next.SerializeAsString();
      UndoReservation(std::move(job), why);
    }
    *ended = true;
  });
}

bool Coordinator::IsStaging(const std::string& job_id) {
  std::lock_guard lock(staging_mu_);
  auto it = staging_.find(job_id);
  return it != staging_.end() && !*it->second.ended;
}

void Coordinator::JoinStaging(bool all) {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(staging_mu_);
    for (auto it = staging_.begin(); it != staging_.end();) {
      if (all || *it->second.ended) {
        done.push_back(std::move(it->second.thread));
        it = staging_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : done) {
    if (t.joinable()) t.join();
  }
}

}  // namespace fedgate::gateway
