#include "federation/autoscale.h"

#include <algorithm>
#include <cmath>

#include "base/str_cat.h"

namespace fedgate::federation {

void Autoscaler::Count(int64_t now_ms, uint64_t n) {
  if (first_ms_ < 0) first_ms_ = now_ms;
  if (!arrivals_.empty() && arrivals_.back().first == now_ms) {
    arrivals_.back().second += n;
  } else {
    arrivals_.emplace_back(now_ms, n);
  }
}

double Autoscaler::Rate(int64_t now_ms) {
  if (first_ms_ < 0) first_ms_ = now_ms;
  const int64_t window = std::max<int64_t>(1, p_.window_ms);
  while (!arrivals_.empty() && arrivals_.front().first <= now_ms - window) arrivals_.pop_front();
  uint64_t seen = 0;
  for (const auto& [t, n] : arrivals_) seen += n;
  // A window not yet full (just started) counts over the time it covers.
  const int64_t span = std::clamp<int64_t>(now_ms - first_ms_, 1000, window);
  return static_cast<double>(seen) * 1000.0 / static_cast<double>(span);
}

Autoscaler::Decision Autoscaler::Tick(int64_t now_ms, uint32_t current) {
  const int64_t window = std::max<int64_t>(1, p_.window_ms);
  Decision d;
  d.rps = Rate(now_ms);
  const double raw = p_.target_rps > 0 ? std::ceil(d.rps / p_.target_rps - 1e-9) : p_.min;
  d.desired = static_cast<uint32_t>(std::clamp<double>(raw, p_.min, p_.max));
  d.next = std::clamp(current, p_.min, p_.max);
  recent_.emplace_back(now_ms, d.desired);
  while (!recent_.empty() && recent_.front().first < now_ms - p_.down_after_ms) recent_.pop_front();
  const auto inputs = [&] {
    return StrCat(d.rps, " rps over ", window / 1000.0, "s, target ", p_.target_rps,
                  " per replica: desired ", d.desired);
  };
  if (d.desired > d.next) {
    below_since_.reset();
    if (!above_since_) above_since_ = now_ms;
    if (now_ms - *above_since_ >= p_.up_after_ms) {
      d.why = StrCat("scale up ", d.next, " -> ", d.desired, ": ", inputs(), " for ",
                     (now_ms - *above_since_) / 1000.0, "s");
      d.next = d.desired;
      above_since_.reset();  // the next step waits a full up_after again
    }
  } else if (d.desired < d.next) {
    above_since_.reset();
    if (!below_since_) below_since_ = now_ms;
    if (now_ms - *below_since_ >= p_.down_after_ms) {
      uint32_t highest = d.desired;
      for (const auto& [t, v] : recent_) highest = std::max(highest, v);
      if (highest < d.next) {
        d.why = StrCat("scale down ", d.next, " -> ", highest, ": ", inputs(),
                       "; the highest desired in the last ", p_.down_after_ms / 1000.0, "s was ",
                       highest);
        d.next = highest;
        below_since_.reset();
      }
    }
  } else {
    above_since_.reset();
    below_since_.reset();
  }
  return d;
}

}  // namespace fedgate::federation
