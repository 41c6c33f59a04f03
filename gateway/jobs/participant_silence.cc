// Confirmed silence (federation/member_contact.h): a slice whose coordinator
// may be taken over keeps running past its lease only on the word of a
// majority of the job's members that they too stopped hearing the
// coordinator; without it the slice stops one lease later, which is what
// lets its coordinator replace it that soon when only this site was cut off.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "federation/member_contact.h"
#include "federation/saturating.h"
#include "gateway/jobs/participant.h"

namespace fedgate::gateway {

namespace {

// The earliest lease end of the job's running slices here (-1: none runs).
template <typename Slices>
int64_t EarliestLeaseEnd(const Slices& slices, const std::string& job_id) {
  int64_t end = -1;
  for (auto s = slices.lower_bound({job_id, 0}); s != slices.end() && s->first.first == job_id;
       ++s) {
    const Slice& sl = s->second;
    if (sl.state != v1::SliceStatusResponse::RUNNING || sl.stopping || sl.launching) continue;
    end = end < 0 ? sl.lease_deadline_ms : std::min(end, sl.lease_deadline_ms);
  }
  return end;
}

}  // namespace

std::vector<Participant::SilenceDue> Participant::SilencesToConfirm() {
  std::vector<SilenceDue> out;
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMs();
  for (const auto& [id, k] : copies_) {
    if (k.successors.empty() || k.ended || k.term.coordinator.empty() ||
        k.term.coordinator == config_.site || k.confirmed_heard_ms == k.term.heard_ms) {
      continue;
    }
    const int64_t end = EarliestLeaseEnd(slices_, id);
    if (end < 0 || now <= end) continue;
    // Past the short fence the slice stops: nothing left to confirm.
    int64_t lease = config_.jobs.lease_ms;
    for (auto s = slices_.lower_bound({id, 0}); s != slices_.end() && s->first.first == id; ++s) {
      lease = std::max(lease, s->second.lease_ms);
    }
    if (now >= federation::SatAdd(end, FenceExtraLocked(id, lease))) continue;
    out.push_back({id, k.term.term, k.members, k.term.heard_ms});
  }
  return out;
}

bool Participant::ConfirmSilence(const std::string& job_id, int64_t heard_ms) {
  std::vector<FenceWrite> fences;
  {
    std::lock_guard lock(mu_);
    auto it = copies_.find(job_id);
    if (it == copies_.end() || it->second.term.heard_ms != heard_ms) return false;
    const int64_t now = clock_->NowMs();
    bool running = false;
    for (auto s = slices_.lower_bound({job_id, 0}); s != slices_.end() && s->first.first == job_id;
         ++s) {
      const Slice& sl = s->second;
      if (sl.state != v1::SliceStatusResponse::RUNNING || sl.stopping) continue;
      running = true;
      // A slice already past its short fence has been told to stop (its
      // shims may have acted): a late word changes nothing.
      if (now >= federation::SatAdd(sl.lease_deadline_ms, FenceExtraLocked(job_id, sl.lease_ms))) {
        return false;
      }
    }
    if (!running) return false;  // stopped meanwhile: nothing runs to keep
    it->second.confirmed_heard_ms = heard_ms;
    for (auto s = slices_.lower_bound({job_id, 0}); s != slices_.end() && s->first.first == job_id;
         ++s) {
      const Slice& sl = s->second;
      if (sl.state == v1::SliceStatusResponse::RUNNING && !sl.stopping) {
        fences.push_back(FenceOfLocked(sl));
      }
    }
  }
  for (const auto& f : fences) WriteFence(f);
  {
    // A renewal that came meanwhile wrote its own (short) fence, perhaps
    // before ours: the newest word goes last.
    std::vector<FenceWrite> again;
    {
      std::lock_guard lock(mu_);
      auto it = copies_.find(job_id);
      if (it != copies_.end() && it->second.term.heard_ms != heard_ms) {
        for (auto s = slices_.lower_bound({job_id, 0});
             s != slices_.end() && s->first.first == job_id; ++s) {
          if (s->second.state == v1::SliceStatusResponse::RUNNING && !s->second.stopping) {
            again.push_back(FenceOfLocked(s->second));
          }
        }
      }
    }
    for (const auto& f : again) WriteFence(f);
    if (!again.empty()) return false;
  }
  spdlog::warn("job {}: a majority of its members has not heard its coordinator either: its "
               "slice here runs on until a successor can take the job over",
               job_id);
  return true;
}

}  // namespace fedgate::gateway
