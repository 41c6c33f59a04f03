// One slice as its site's participant runs it: the ranks of one job epoch
// on this site's GPUs, their lease, and how they ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fedgate/v1/federation.pb.h"

namespace fedgate::gateway {

using SliceState = v1::SliceStatusResponse;

struct RankProc {
  uint32_t rank = 0;
  pid_t pid = -1;
  uint64_t start_time = 0;  // of pid, from /proc
  std::string exit_file;    // written by its shim
  bool exited = false;
  int code = 0;
};

struct Slice {
  v1::ReservationKey key;
  std::vector<RankProc> ranks;
  // Between a commit's decision and its ranks' start (spawned without the
  // participant's lock): no rank to poll yet, so no sweep may end it.
  bool launching = false;
  int64_t lease_deadline_ms = 0;
  int64_t lease_ms = 0;
  v1::SliceStatusResponse::State state = v1::SliceStatusResponse::RUNNING;
  std::string message;
  bool stopping = false;
  int64_t kill_at_ms = 0;
  bool preemptible = false;  // spot or borrowed
  int64_t started_at_ms = 0;
  std::map<std::string, uint32_t> gpus_by_node;
  std::string preempted_by;  // the job that preempted it
  std::vector<std::string> preempt_files;
  std::string cgroup;       // "" = none
  bool released = false;    // every rank exited and the hold's GPUs are free
  bool reported = false;    // ... and its coordinator has asked since
  // Stopped by its coordinator's abort: the coordinator decided its end
  // (it needs no status call to learn it).
  bool aborted = false;
  // Stopped because no coordinator renewed it in time: its job's record is
  // kept (a takeover may yet carry the job on once a majority is heard).
  bool fenced = false;
  int64_t ended_at_ms = 0;  // when released; finished slices are pruned later
  // recovery: replace. The world (FEDGATE_RESTART) its ranks belong to; the
  // hold outlives ranks that fail or are halted for a world restart
  // (keep_hold), and a stop that keeps it parks the slice (no rank runs,
  // GPUs held, lease renewed) until the next world's commit or an abort.
  uint32_t restart = 0;
  bool keep_hold = false;
  bool keep_after_stop = false;
  bool parked = false;
  uint32_t checkpoint_keep = 0;  // 0: the job's checkpoints are not copied
  std::vector<std::string> world_sites;
  std::vector<std::string> datasets;  // read by its ranks (kept from cache eviction)
  // A finished slice only answers status calls (state, message, exit
  // codes): what ran, stopped or preempted its ranks goes, so that the
  // window of finished slices stays small.
  void DropRunningState() {
    for (auto& r : ranks) std::string().swap(r.exit_file);
    std::vector<std::string>().swap(preempt_files);
    std::string().swap(cgroup);
    gpus_by_node.clear();
  }
};

using SliceKey = std::pair<std::string, uint64_t>;  // job id, epoch

}  // namespace fedgate::gateway
