// A job's record as a member site keeps it beside its holds
// (participant_job_copy.cc): its version, the term and coordinator this site
// accepted, who may take the job over and when, and what keeps it here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "federation/coordinator_term.h"

namespace fedgate::gateway {

// A kept record: its version, the job's term and coordinator as this site
// accepted them, and the job's members.
struct KeptCopy {
  uint64_t version = 0;
  // The term its coordinator wrote the record at (the record's, not the
  // accepted `term.term`, which grants move): with `version`, how current
  // the copy is when a candidate asks for a vote.
  uint64_t record_term = 0;
  federation::TermState term;
  std::vector<std::string> members;
  // Who may take the job over, in order (empty: nobody), and when
  // (the record's run plan: SuccessorsOf).
  std::vector<std::string> successors;
  int64_t takeover_after_ms = 0;
  int64_t stagger_ms = 0;
  // This site is one of the job's witnesses: it keeps the record with no
  // slice here, until the coordinator says the job left RUNNING or it
  // has heard no coordinator for kFinishedSliceKeepMs.
  bool witness = false;
  // A queued record (the job before its first world, QueuedRecord): a
  // newer record that no longer names this site a member ends it here.
  bool queued = false;
  // The record's attempt: a slice of an earlier one ended before the
  // coordinator placed this one, so its end was seen.
  uint32_t attempt = 0;
  // The epoch of this site's slice in the record's run plan: a slice here
  // under another epoch was replaced by the coordinator, who so saw its
  // end. kNoSliceHere: the run has no slice here (a witness, or a site
  // the coordinator replaced); 0: the record does not say.
  static constexpr uint64_t kNoSliceHere = UINT64_MAX;
  uint64_t epoch_here = 0;
  // Its coordinator said the job left RUNNING: kept only while a slice
  // here still holds GPUs, never taken over or voted for.
  bool ended = false;
  // Loaded at a restart with no slice here (its end, if any, went with
  // the restart): kept, as a slice whose end its coordinator may not have
  // seen, until that coordinator calls (it learns the slice is unknown) or
  // kFinishedSliceKeepMs passed; -1: not so.
  int64_t restored_alone_ms = -1;
  // The `term.heard_ms` at which a majority of the members confirmed the
  // coordinator silent (-1: never): the slices here keep the takeover
  // fence until the coordinator, or a successor, is heard again.
  int64_t confirmed_heard_ms = -1;
  // The lease the coordinator last gave (0: none yet): a member that has
  // heard it within this lease grants no pre-vote, whatever its own
  // configured lease (the coordinator counts on it).
  int64_t lease_ms = 0;
};

}  // namespace fedgate::gateway
