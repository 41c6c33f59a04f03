// The job state machine: the states of DESIGN.md, which transitions exist and
// who may make them. Every write of a job's state is checked here (the job
// store calls CheckTransition inside its compare-and-set), so a stale writer
// can neither resurrect a cancelled job nor skip a phase.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "fedgate/v1/jobs.pb.h"

namespace fedgate::federation {

enum class JobState { kPending, kReserving, kRunning, kSucceeded, kFailed, kCancelled };

// Who asks for a transition.
enum class JobActor {
  kCoordinator,  // places, reserves, runs, retries and ends jobs
  kCaller,       // a tenant's user or an admin: may only cancel
};

// "PENDING", "RESERVING", ... (the names of the JSON contract).
std::string_view JobStateName(JobState s);
std::optional<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);
// The API's enum (v1::Job::State) and back; STATE_UNSPECIFIED has no JobState.
v1::Job::State ToProto(JobState s);
std::optional<JobState> FromProto(v1::Job::State s);
bool IsTerminal(v1::Job::State s);

// OK when `who` may move a job from `from` to `to`. A job may stay in its
// state (a new reason or attempt), except once it ended. FAILED_PRECONDITION
// names both states otherwise.
absl::Status CheckTransition(JobState from, JobState to, JobActor who);

}  // namespace fedgate::federation
