// The fence of a slice whose coordinator may be taken over, confirmed by a
// majority instead of timed (docs/coordinator_takeover.md, "Confirmed
// silence"). A site that stops hearing its coordinator keeps its ranks past
// the lease only when a majority of the job's members (itself counted)
// would pre-vote the coordinator out: they too have not heard it for a
// lease. Until then its fence is the short one, one lease past the lease.
// The coordinator, for its part, calls a silent site's slice lost after the
// short fence when it heard enough other members without a break of a
// lease all through the window in which the site could have asked them:
// then no majority could have confirmed the silence, and the slice has
// surely stopped at its short fence.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fedgate::federation {

// How long a site keeps a slice of a job that may be taken over running
// without a renewal while no majority confirmed its coordinator silent:
// one more lease to ask, never past the takeover fence.
int64_t UnconfirmedFenceMs(int64_t takeover_fence_ms, int64_t lease_ms);

// The coordinator's unbroken contact with one member of one job: renewals
// the member answered, each sent less than a lease (minus a margin) after
// the previous answer came back, so the member heard the coordinator at
// least once a lease from `since_ms` until `last_send_ms` + lease.
struct MemberContact {
  int64_t since_ms = -1;        // first answer of the unbroken run
  int64_t last_send_ms = -1;    // when the last answered renewal was sent
  int64_t last_answer_ms = -1;  // when its answer came back
};

// Margin kept off the lease for the clocks' rates and processing.
inline constexpr int64_t kContactMarginMs = 250;

// A renewal sent at `send_ms` was answered at `answer_ms`.
void NoteContact(MemberContact* c, int64_t send_ms, int64_t answer_ms, int64_t lease_ms);

// A member that answered no renewal yet holds the lease its commit gave:
// sent no earlier than the run's epoch, answered before the first renewal
// pass that saw the run (`pass_sent_ms`). Noted so that a site cut before
// its first renewal is judged like one cut after it; no-op once the member
// has a renewal on record.
void NoteCommitContact(MemberContact* c, int64_t epoch_ms, int64_t pass_sent_ms);

// Whether `silent` (a member whose last answered renewal `contact` has)
// cannot have gathered a majority confirming the coordinator silent before
// its short fence: the coordinator `self` grants none (it hears itself),
// and enough other members heard the coordinator without a break of a
// lease from `silent`'s lease end to its short fence (`window_ms` after).
bool SilenceUnconfirmable(const std::vector<std::string>& members, const std::string& self,
                          const std::string& silent,
                          const std::map<std::string, MemberContact>& contact, int64_t lease_ms,
                          int64_t window_ms);

}  // namespace fedgate::federation
