#include "federation/member_contact.h"

#include <algorithm>

#include "federation/coordinator_term.h"
#include "federation/saturating.h"

namespace fedgate::federation {

int64_t UnconfirmedFenceMs(int64_t takeover_fence_ms, int64_t lease_ms) {
  return std::min(takeover_fence_ms, SatAdd(lease_ms, lease_ms));
}

void NoteContact(MemberContact* c, int64_t send_ms, int64_t answer_ms, int64_t lease_ms) {
  // The member heard this renewal between send_ms and answer_ms, the one
  // before after the previous send: the gap it saw is under answer_ms minus
  // the previous send.
  const bool unbroken =
      c->last_send_ms >= 0 && answer_ms - c->last_send_ms < lease_ms - kContactMarginMs;
  if (!unbroken) c->since_ms = answer_ms;
  c->last_send_ms = send_ms;
  c->last_answer_ms = answer_ms;
}

void NoteCommitContact(MemberContact* c, int64_t epoch_ms, int64_t pass_sent_ms) {
  if (c->last_send_ms >= 0) return;
  c->since_ms = pass_sent_ms;
  c->last_send_ms = std::min(epoch_ms, pass_sent_ms);
  c->last_answer_ms = pass_sent_ms;
}

bool SilenceUnconfirmable(const std::vector<std::string>& members, const std::string& self,
                          const std::string& silent,
                          const std::map<std::string, MemberContact>& contact, int64_t lease_ms,
                          int64_t window_ms) {
  const auto b = contact.find(silent);
  if (b == contact.end() || b->second.last_send_ms < 0) return false;
  // The silent site's lease ended no earlier than its last renewal's send
  // plus a lease, and it took confirmations until no later than that
  // renewal's answer plus a lease plus the window.
  const int64_t asks_from = SatAdd(b->second.last_send_ms, lease_ms);
  const int64_t asks_until = SatAdd(SatAdd(b->second.last_answer_ms, lease_ms), window_ms);
  size_t heard = 0, others = 0;
  for (const auto& m : members) {
    if (m == self || m == silent) continue;
    ++others;
    const auto c = contact.find(m);
    if (c == contact.end() || c->second.since_ms < 0) continue;
    // Heard from before the asks began until a lease short of their end
    // (so the member's last hearing covers their end).
    if (c->second.since_ms <= asks_from &&
        SatAdd(c->second.last_send_ms, lease_ms) >= SatAdd(asks_until, kContactMarginMs)) {
      ++heard;
    }
  }
  // Who could confirm: the silent site and the members not heard so.
  const size_t could = 1 + (others - heard);
  return could < Majority(members.size());
}

}  // namespace fedgate::federation
