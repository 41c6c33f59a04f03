#include "gateway/jobs/job_story.h"

#include "absl/time/time.h"
#include "base/str_cat.h"

namespace fedgate::gateway {

JobStoryEvent StoryEvent(int64_t now_ms, std::string type, std::string site, std::string message) {
  JobStoryEvent e;
  e.time_ms = now_ms;
  e.type = std::move(type);
  e.site = std::move(site);
  e.message = std::move(message);
  return e;
}

JobStoryEvent PlacedEvent(int64_t now_ms, const v1::RunPlan& run, uint32_t attempt) {
  std::string sites;
  for (const auto& s : run.sites()) sites += StrCat(sites.empty() ? "" : ", ", s.site());
  std::string msg = StrCat("attempt ", attempt, " placed on ", sites, ": ", run.placement_summary());
  for (const auto& d : run.placement()) {
    msg += StrCat("; ", d.site(), d.used() ? " (used): " : ": ", d.reason());
  }
  return StoryEvent(now_ms, "placed", "", std::move(msg));
}

v1::JobEvent ToProto(const JobStoryEvent& e) {
  v1::JobEvent out;
  out.set_time(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(e.time_ms),
                                absl::UTCTimeZone()));
  out.set_type(e.type);
  out.set_site(e.site);
  out.set_message(e.message);
  out.set_seq(e.seq);
  return out;
}

}  // namespace fedgate::gateway
