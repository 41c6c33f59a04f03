#include "tests/support/fake_participants.h"

#include <chrono>

namespace fedgate::testing {

void FakeParticipants::AddSite(const std::string& site, gateway::Participant* p) {
  std::lock_guard lock(mu_);
  sites_[site] = p;
}

void FakeParticipants::Freeze(const std::string& site, const std::string& method) {
  std::lock_guard lock(mu_);
  frozen_[site].insert(method);
}

void FakeParticipants::Thaw(const std::string& site) {
  std::deque<Waiting> q;
  {
    std::lock_guard lock(mu_);
    frozen_.erase(site);
    q.swap(queued_[site]);
  }
  for (auto& w : q) w.deliver();
}

void FakeParticipants::Expire(const std::string& site) {
  std::deque<Waiting> q;
  {
    std::lock_guard lock(mu_);
    q.swap(queued_[site]);
  }
  for (auto& w : q) w.expire();
}

bool FakeParticipants::WaitForQueued(const std::string& site, size_t n) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return queued_[site].size() >= n; });
}

int FakeParticipants::Delivered(const std::string& method, const std::string& site) {
  std::lock_guard lock(mu_);
  auto it = delivered_.find(method + " " + site);
  return it == delivered_.end() ? 0 : it->second;
}

bool FakeParticipants::WaitForDelivered(const std::string& method, const std::string& site,
                                        int n) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::seconds(5),
                      [&] { return delivered_[method + " " + site] >= n; });
}

template <typename Resp>
void FakeParticipants::Route(
    const std::string& method, const std::string& site,
    std::function<absl::StatusOr<Resp>(gateway::Participant*, const std::string&)> call,
    Done<Resp> done) {
  gateway::Participant* p = nullptr;
  auto deliver = [this, method, site, call, done] {
    gateway::Participant* target = nullptr;
    {
      std::lock_guard lock(mu_);
      target = sites_[site];
      ++delivered_[method + " " + site];
    }
    cv_.notify_all();
    done(call(target, from_));
  };
  {
    std::unique_lock lock(mu_);
    auto it = sites_.find(site);
    if (it == sites_.end()) {
      lock.unlock();
      done(absl::UnavailableError("no such site: " + site));
      return;
    }
    p = it->second;
    auto f = frozen_.find(site);
    if (f != frozen_.end() && (f->second.contains("") || f->second.contains(method))) {
      queued_[site].push_back(
          {deliver, [done] { done(absl::DeadlineExceededError("deadline exceeded (frozen site)")); }});
      cv_.notify_all();
      return;
    }
  }
  (void)p;
  deliver();
}

void FakeParticipants::Prepare(const std::string& site, v1::PrepareRequest req, int64_t,
                               Done<v1::PrepareResponse> done) {
  req.set_site(from_);
  Route<v1::PrepareResponse>(
      "Prepare", site,
      [req](gateway::Participant* p, const std::string& from) { return p->Prepare(from, req); },
      std::move(done));
}

void FakeParticipants::Commit(const std::string& site, v1::CommitRequest req, int64_t,
                              Done<v1::CommitResponse> done) {
  req.set_site(from_);
  Route<v1::CommitResponse>(
      "Commit", site,
      [req](gateway::Participant* p, const std::string& from) { return p->Commit(from, req); },
      std::move(done));
}

void FakeParticipants::Abort(const std::string& site, v1::AbortRequest req, int64_t,
                             Done<v1::AbortResponse> done) {
  req.set_site(from_);
  Route<v1::AbortResponse>(
      "Abort", site,
      [req](gateway::Participant* p, const std::string& from) { return p->Abort(from, req); },
      std::move(done));
}

void FakeParticipants::SliceStatus(const std::string& site, v1::SliceStatusRequest req, int64_t,
                                   Done<v1::SliceStatusResponse> done) {
  req.set_site(from_);
  Route<v1::SliceStatusResponse>(
      "SliceStatus", site,
      [req](gateway::Participant* p, const std::string& from) { return p->Status(from, req); },
      std::move(done));
}

void FakeParticipants::ReadLog(const std::string& site, v1::ReadLogRequest req, int64_t,
                               Done<v1::ReadLogResponse> done) {
  req.set_site(from_);
  Route<v1::ReadLogResponse>(
      "ReadLog", site,
      [req](gateway::Participant* p, const std::string& from) { return p->ReadLog(from, req); },
      std::move(done));
}

}  // namespace fedgate::testing
