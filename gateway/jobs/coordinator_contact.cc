// Confirmed silence, the coordinator's side (federation/member_contact.h):
// which members heard this coordinator without a break, and from that,
// whether a silent site's slice stopped at its short fence.
#include "federation/member_contact.h"

#include "gateway/jobs/coordinator.h"
#include "gateway/jobs/job_copy.h"

namespace fedgate::gateway {

void Coordinator::NoteContacts(const RenewWork& w, int64_t sent, int64_t now) {
  auto& contact = contact_[w.job.id];
  for (int i = 0; i < w.run.sites_size() && i < static_cast<int>(w.answers.size()); ++i) {
    auto& c = contact[w.run.sites(i).site()];
    if (w.answers[i].ok()) {
      federation::NoteContact(&c, sent, now, lease_ms_);
    } else {
      // Silent since its commit (the epoch precedes it; this pass's listing
      // saw the run, so the commit was answered before `sent`).
      federation::NoteCommitContact(&c, static_cast<int64_t>(w.run.epoch()), sent);
    }
  }
  for (size_t i = 0; i < w.witnesses.size() && i < w.witness_answers.size(); ++i) {
    if (w.witness_answers[i].ok()) {
      federation::NoteContact(&contact[w.witnesses[i]], sent, now, lease_ms_);
    }
  }
}

int64_t Coordinator::LostAfterMs(
    const JobRecord& job, const v1::RunPlan& run,
    const std::vector<absl::StatusOr<v1::SliceStatusResponse>>& answers) {
  const std::string& self = core_->config().site;
  if (SuccessorsOf(run, self).empty()) return SiteLostAfterMs(run, self, lease_ms_, true);
  const auto members = MembersOf(run, self);
  const int64_t window = UnconfirmedSliceFenceMs(run, self, lease_ms_) - lease_ms_;
  const auto& contact = contact_[job.id];
  // Every silent site must have stopped at its short fence for the short
  // wait to hold; one that may have had its silence confirmed waits long.
  bool unconfirmable = true;
  for (int i = 0; i < run.sites_size() && i < static_cast<int>(answers.size()); ++i) {
    const std::string& site = run.sites(i).site();
    if (answers[i].ok() || site == self) continue;
    unconfirmable = unconfirmable && federation::SilenceUnconfirmable(members, self, site, contact,
                                                                      lease_ms_, window);
  }
  return SiteLostAfterMs(run, self, lease_ms_, unconfirmable);
}

}  // namespace fedgate::gateway
