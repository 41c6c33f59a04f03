#include "federation/job_state.h"

#include <array>
#include <utility>

#include "base/str_cat.h"

namespace fedgate::federation {
namespace {

using S = JobState;
constexpr std::array<std::pair<S, std::string_view>, 6> kNames = {{
    {S::kPending, "PENDING"},
    {S::kReserving, "RESERVING"},
    {S::kRunning, "RUNNING"},
    {S::kSucceeded, "SUCCEEDED"},
    {S::kFailed, "FAILED"},
    {S::kCancelled, "CANCELLED"},
}};

struct Edge {
  S from, to;
  JobActor who;
};
// Every move a job can make. Not listed: anything out of a terminal state.
constexpr std::array<Edge, 11> kEdges = {{
    {S::kPending, S::kReserving, JobActor::kCoordinator},   // placed; phase one starts
    {S::kReserving, S::kRunning, JobActor::kCoordinator},   // the durable decision
    {S::kReserving, S::kPending, JobActor::kCoordinator},   // a site refused; retry later
    {S::kReserving, S::kFailed, JobActor::kCoordinator},    // attempts used up
    {S::kRunning, S::kSucceeded, JobActor::kCoordinator},   // every rank exited 0
    {S::kRunning, S::kPending, JobActor::kCoordinator},     // a slice failed; next attempt
    {S::kRunning, S::kFailed, JobActor::kCoordinator},      // attempts used up
    {S::kPending, S::kFailed, JobActor::kCoordinator},      // e.g. an invalid stored spec
    {S::kPending, S::kCancelled, JobActor::kCaller},
    {S::kReserving, S::kCancelled, JobActor::kCaller},
    {S::kRunning, S::kCancelled, JobActor::kCaller},
}};

}  // namespace

std::string_view JobStateName(JobState s) {
  for (const auto& [state, name] : kNames) {
    if (state == s) return name;
  }
  return "UNKNOWN";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (const auto& [state, n] : kNames) {
    if (n == name) return state;
  }
  return std::nullopt;
}

bool IsTerminal(JobState s) {
  return s == S::kSucceeded || s == S::kFailed || s == S::kCancelled;
}

v1::Job::State ToProto(JobState s) {
  switch (s) {
    case S::kPending: return v1::Job::PENDING;
    case S::kReserving: return v1::Job::RESERVING;
    case S::kRunning: return v1::Job::RUNNING;
    case S::kSucceeded: return v1::Job::SUCCEEDED;
    case S::kFailed: return v1::Job::FAILED;
    case S::kCancelled: return v1::Job::CANCELLED;
  }
  return v1::Job::STATE_UNSPECIFIED;
}

std::optional<JobState> FromProto(v1::Job::State s) {
  for (JobState j : {S::kPending, S::kReserving, S::kRunning, S::kSucceeded, S::kFailed,
                     S::kCancelled}) {
    if (ToProto(j) == s) return j;
  }
  return std::nullopt;
}

bool IsTerminal(v1::Job::State s) {
  auto j = FromProto(s);
  return j && IsTerminal(*j);
}

absl::Status CheckTransition(JobState from, JobState to, JobActor who) {
  if (IsTerminal(from)) {
    return absl::FailedPreconditionError(
        StrCat("the job already ended (", JobStateName(from), ")"));
  }
  if (from == to && who == JobActor::kCoordinator) return absl::OkStatus();
  for (const auto& e : kEdges) {
    if (e.from == from && e.to == to && e.who == who) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(StrCat(
      who == JobActor::kCaller ? "a caller" : "the coordinator", " cannot move a job from ",
      JobStateName(from), " to ", JobStateName(to)));
}

}  // namespace fedgate::federation
