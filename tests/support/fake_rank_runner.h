// A RankRunner that starts nothing: each Launch records its spec and hands
// out a made-up pid, the test says when a rank exits, and signals act as
// they would on a plain process (SIGTERM ends it unless the test made it
// ignore SIGTERM; SIGKILL always does). Thread-safe: the participant
// launches without its lock while a sweep may poll.
#pragma once

#include <csignal>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "gateway/exec/rank_runner.h"

namespace fedgate::testing {

class FakeRankRunner final : public gateway::RankRunner {
 public:
  struct Launched {
    gateway::RankProcessSpec spec;
    pid_t pid = 0;
  };

  bool supervised() const override { return supervised_; }
  const gateway::RankUser& user() const override { return user_; }

  absl::StatusOr<pid_t> Launch(const gateway::RankProcessSpec& spec) override {
    if (on_launch) on_launch(spec);
    std::lock_guard lock(mu_);
    if (fail_launches_) return absl::InternalError("fake: cannot start");
    const pid_t pid = next_pid_++;
    launched_.push_back({spec, pid});
    return pid;
  }
  std::optional<int> Poll(pid_t pid, const std::string&, uint64_t) override {
    std::lock_guard lock(mu_);
    auto it = exited_.find(pid);
    if (it == exited_.end()) return std::nullopt;
    return it->second;
  }
  void Signal(pid_t pid, int sig) override {
    std::lock_guard lock(mu_);
    signals_.emplace_back(pid, sig);
    if (exited_.contains(pid)) return;
    if (sig == SIGKILL || (sig == SIGTERM && !ignore_sigterm_)) exited_[pid] = 128 + sig;
  }
  std::optional<uint64_t> StartTime(pid_t) override { return 42; }

  // The rank process `pid` ends with `code`.
  void Exit(pid_t pid, int code) {
    std::lock_guard lock(mu_);
    exited_[pid] = code;
  }
  void IgnoreSigterm(bool ignore) {
    std::lock_guard lock(mu_);
    ignore_sigterm_ = ignore;
  }
  void FailLaunches(bool fail) {
    std::lock_guard lock(mu_);
    fail_launches_ = fail;
  }
  void SetSupervised(bool s) { supervised_ = s; }
  std::vector<Launched> launched() const {
    std::lock_guard lock(mu_);
    return launched_;
  }
  // The signals sent to `pid`, in order.
  std::vector<int> SignalsTo(pid_t pid) const {
    std::lock_guard lock(mu_);
    std::vector<int> out;
    for (const auto& [p, s] : signals_) {
      if (p == pid) out.push_back(s);
    }
    return out;
  }

  // Runs at the start of every Launch (before it records anything).
  std::function<void(const gateway::RankProcessSpec&)> on_launch;

 private:
  mutable std::mutex mu_;
  gateway::RankUser user_{false, 0, 0, "tester"};
  bool supervised_ = false;
  bool ignore_sigterm_ = false;
  bool fail_launches_ = false;
  pid_t next_pid_ = 1000;
  std::vector<Launched> launched_;
  std::map<pid_t, int> exited_;
  std::vector<std::pair<pid_t, int>> signals_;
};

}  // namespace fedgate::testing
