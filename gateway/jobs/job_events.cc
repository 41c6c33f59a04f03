#include "gateway/jobs/job_events.h"

#include <chrono>
#include <vector>

namespace fedgate::gateway {

JobEvents::JobEvents(int64_t tick_ms) : tick_ms_(tick_ms) {}

JobEvents::~JobEvents() { Stop(); }

void JobEvents::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Loop(); });
}

void JobEvents::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

uint64_t JobEvents::Subscribe(const std::string& job_id, bool on_tick,
                              std::function<void()> wake) {
  std::lock_guard lock(mu_);
  const uint64_t token = next_++;
  subs_[token] = Sub{job_id, on_tick, std::move(wake)};
  by_job_.emplace(job_id, token);
  return token;
}

void JobEvents::Unsubscribe(uint64_t token) {
  std::unique_lock lock(mu_);
  auto it = subs_.find(token);
  if (it != subs_.end()) {
    auto [b, e] = by_job_.equal_range(it->second.job);
    for (auto j = b; j != e; ++j) {
      if (j->second == token) {
        by_job_.erase(j);
        break;
      }
    }
    subs_.erase(it);
  }
  // A wake that unsubscribes itself must not wait for itself.
  if (std::this_thread::get_id() == thread_.get_id()) return;
  idle_.wait(lock, [&] { return running_ != token; });
}

void JobEvents::Notify(const std::string& job_id) {
  {
    std::lock_guard lock(mu_);
    if (by_job_.find(job_id) == by_job_.end()) return;  // nobody watches it
    written_.insert(job_id);
  }
  cv_.notify_all();
}

size_t JobEvents::subscribers() {
  std::lock_guard lock(mu_);
  return subs_.size();
}

void JobEvents::Loop() {
  using Clock = std::chrono::steady_clock;
  auto next_tick = Clock::now() + std::chrono::milliseconds(tick_ms_);
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_until(lock, next_tick, [&] { return stop_ || !written_.empty(); });
    if (stop_) break;
    std::vector<uint64_t> due;
    for (const auto& job : written_) {
      auto [b, e] = by_job_.equal_range(job);
      for (auto j = b; j != e; ++j) due.push_back(j->second);
    }
    written_.clear();
    if (Clock::now() >= next_tick) {
      next_tick = Clock::now() + std::chrono::milliseconds(tick_ms_);
      for (const auto& [token, sub] : subs_) {
        if (sub.on_tick) due.push_back(token);
      }
    }
    for (uint64_t token : due) {
      auto it = subs_.find(token);
      if (it == subs_.end()) continue;  // unsubscribed meanwhile
      auto wake = it->second.wake;
      running_ = token;
      lock.unlock();
      wake();
      lock.lock();
      running_ = 0;
      idle_.notify_all();
      if (stop_) break;
    }
  }
}

}  // namespace fedgate::gateway
