#include "gateway/serve/service_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "base/str_cat.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/jobs/job_story.h"
#include "gateway/ops/metrics.h"

namespace fedgate::gateway {

using federation::JobState;

namespace {

constexpr int64_t kPassMs = 1000;

bool Live(JobState s) { return !federation::IsTerminal(s); }

}  // namespace

ServiceController::ServiceController(JobStore* store, JobManager* jobs, const federation::Clock* clock,
                                     Metrics* metrics, std::string site)
    : store_(store), jobs_(jobs), clock_(clock), metrics_(metrics), site_(std::move(site)) {
  if (metrics_ != nullptr) {
    metrics_->Describe("fedgate_service_replicas", "gauge",
                       "Replicas of each service this gateway coordinates, by state "
                       "(ready, starting: running but not ready, pending: not placed yet)");
  }
}

ServiceController::~ServiceController() { Stop(); }

void ServiceController::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ServiceController::Stop() {
  stop_ = true;
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServiceController::Loop() {
  while (!stop_) {
    Pass();
    std::unique_lock lock(wake_mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(kPassMs), [&] { return stop_.load(); });
  }
}

void ServiceController::Pass() {
  auto active = store_->ListAllActive();
  if (!active.ok()) return;
  const int64_t now = clock_->NowMs();
  std::map<std::string, JobRecord> svcs;
  std::map<std::string, std::vector<JobRecord>> reps;
  for (auto& j : *active) {
    if (federation::IsService(j.spec)) {
      if (j.moved_to.empty()) svcs.emplace(j.id, std::move(j));
    } else if (!j.spec.service().empty()) {
      reps[j.spec.service()].push_back(std::move(j));
    }
  }
  std::vector<JobRecord> orphans;
  for (auto& [sid, list] : reps) {
    if (svcs.contains(sid)) continue;
    for (auto& r : list) orphans.push_back(r);
  }
  struct Work {
    std::string id;
    uint32_t desired = 0;
    std::string why;
  };
  std::vector<Work> work;
  std::vector<std::pair<std::shared_ptr<Replica>, federation::ServicePolicy>> due;
  {
    std::lock_guard lock(mu_);
    for (auto it = services_.begin(); it != services_.end();) {
      if (svcs.contains(it->first)) {
        ++it;
        continue;
      }
      if (metrics_ != nullptr) {
        for (const char* st : {"ready", "starting", "pending"}) {
          metrics_->Remove("fedgate_service_replicas", {{"service", it->second.rec.spec.name()}, {"state", st}});
        }
      }
      counted_.erase(it->first);
      it = services_.erase(it);
    }
    for (auto& [sid, rec] : svcs) {
      Service& s = services_[sid];
      s.rec = rec;
      s.policy = federation::PolicyOf(rec.spec);
      if (!s.scaler) {
        s.scaler = std::make_unique<federation::Autoscaler>(s.policy);
      } else {
        s.scaler->SetPolicy(s.policy);
      }
      std::map<std::string, std::shared_ptr<Replica>> views;
      for (const auto& r : reps[sid]) {
        if (r.state != JobState::kRunning) continue;
        v1::RunPlan run;
        if (!run.ParseFromString(r.run) || run.sites_size() == 0) continue;
        auto& view = s.replicas[r.id];
        if (!view || view->epoch != run.epoch()) {  // new, or started again elsewhere
          view = std::make_shared<Replica>();
          view->job_id = r.id;
          view->service = rec.spec.name();
          view->tenant = rec.tenant;
          view->site = run.sites(0).site();
          view->addr = run.master_addr();
          view->port = run.master_port();
          view->epoch = run.epoch();
          view->next_probe_ms = now;
        }
        if (view->next_probe_ms <= now) {
          view->next_probe_ms = now + s.policy.probe_period_ms;
          due.emplace_back(view, s.policy);
        }
        views[r.id] = view;
      }
      s.replicas = std::move(views);
      Work w{sid, s.policy.desired, ""};
      const uint64_t counted = std::exchange(counted_[sid], 0);
      if (counted > 0) s.scaler->Count(now, counted);
      s.rps = s.scaler->Rate(now);
      if (s.policy.autoscale) {
        if (now >= s.next_tick_ms) {
          s.next_tick_ms = now + s.policy.interval_ms;
          auto d = s.scaler->Tick(now, w.desired);
          if (!d.why.empty()) {
            w.desired = d.next;
            w.why = d.why;
          }
        }
      }
      work.push_back(std::move(w));
    }
  }
  for (const auto& r : orphans) CancelReplica(r, "its service ended");
  Probe(std::move(due));
  for (const auto& w : work) {
    const JobRecord& svc = svcs[w.id];
    Reconcile(svc, reps[w.id], w.desired);
    uint32_t ready = 0, starting = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, r] : services_[w.id].replicas) (r->ready ? ready : starting)++;
    }
    if (metrics_ != nullptr) {
      const uint32_t live = static_cast<uint32_t>(reps[w.id].size());
      const std::string& name = svc.spec.name();
      metrics_->Set("fedgate_service_replicas", {{"service", name}, {"state", "ready"}}, ready);
      metrics_->Set("fedgate_service_replicas", {{"service", name}, {"state", "starting"}}, starting);
      metrics_->Set("fedgate_service_replicas", {{"service", name}, {"state", "pending"}},
                    live >= ready + starting ? live - ready - starting : 0);
    }
    SaveService(svc, ready, w.desired, w.why);
  }
}

void ServiceController::Reconcile(const JobRecord& svc, const std::vector<JobRecord>& replicas,
                                  uint32_t desired) {
  std::vector<JobRecord> live;
  for (const auto& r : replicas) {
    if (Live(r.state)) live.push_back(r);
  }
  const auto policy = federation::PolicyOf(svc.spec);
  if (live.size() < desired) {
    uint32_t spot = 0;
    for (const auto& r : live) spot += r.spec.priority() == "spot" ? 1 : 0;
    const uint32_t allowed = federation::SpotAllowance(policy, desired);
    for (size_t i = live.size(); i < desired && !stop_; ++i) {
      const bool as_spot = spot < allowed && i >= policy.min;
      auto made = jobs_->SubmitReplica(svc.tenant, federation::ReplicaSpec(svc.spec, svc.id, as_spot));
      if (!made.ok()) {
        spdlog::warn("service {} ({}): cannot start a replica: {}", svc.spec.name(), svc.id,
                     std::string(made.status().message()));
        return;
      }
      spot += as_spot ? 1 : 0;
      spdlog::info("service {} ({}): replica {} submitted ({} of {}{})", svc.spec.name(), svc.id,
                   made->id, i + 1, desired, as_spot ? ", spot" : "");
    }
    return;
  }
  if (live.size() > desired) {
    // Let go of the replicas that serve least: not placed, then not ready.
    std::map<std::string, bool> ready;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, r] : services_[svc.id].replicas) ready[id] = r->ready;
    }
    auto rank = [&](const JobRecord& r) {
      if (r.state != JobState::kRunning) return 0;
      return ready[r.id] ? 2 : 1;
    };
    std::stable_sort(live.begin(), live.end(),
                     [&](const JobRecord& a, const JobRecord& b) { return rank(a) < rank(b); });
    for (size_t i = 0; i < live.size() - desired; ++i) {
      CancelReplica(live[i], StrCat("service scaled to ", desired));
    }
  }
}

void ServiceController::CancelReplica(const JobRecord& r, const std::string& why) {
  Identity as;
  as.role = Role::kUser;
  as.tenant = r.tenant;
  as.name = "service-controller";
  v1::CancelJobRequest req;
  req.set_id(r.id);
  auto out = jobs_->Cancel(as, req);
  if (out.ok()) {
    spdlog::info("service {}: replica {} stopped: {}", r.spec.service(), r.id, why);
  } else if (!absl::IsFailedPrecondition(out.status())) {
    spdlog::warn("service {}: cannot stop replica {}: {}", r.spec.service(), r.id,
                 std::string(out.status().message()));
  }
}

void ServiceController::SaveService(JobRecord rec, uint32_t ready, uint32_t desired,
                                    const std::string& why) {
  const int64_t now = clock_->NowMs();
  JobRecord next = rec;
  next.reason = StrCat(ready, " of ", desired, " replica(s) ready");
  if (desired != rec.spec.replicas().desired()) next.spec.mutable_replicas()->set_desired(desired);
  if (!why.empty()) next.new_events.push_back(StoryEvent(now, "scaled", site_, why));
  const bool start = ready > 0 && next.state == JobState::kPending;
  if (!start && next.reason == rec.reason && why.empty() &&
      desired == rec.spec.replicas().desired()) {
    return;
  }
  next.updated_at_unix_ms = now;
  if (start) {
    // A service is RUNNING from its first ready replica on, until deleted.
    next.state = JobState::kReserving;
    if (!store_->Save(&next, federation::JobActor::kCoordinator).ok()) return;
    next.state = JobState::kRunning;
    next.new_events.push_back(StoryEvent(now, "started", site_, next.reason));
  }
  if (auto st = store_->Save(&next, federation::JobActor::kCoordinator); !st.ok()) {
    if (!absl::IsAborted(st)) {
      spdlog::warn("service {}: cannot save: {}", rec.id, std::string(st.message()));
    }
    return;  // changed meanwhile (cancelled, scaled): the next pass sees it
  }
  if (jobs_ != nullptr) jobs_->events()->Notify(next.id);
}

void ServiceController::Probe(
    std::vector<std::pair<std::shared_ptr<Replica>, federation::ServicePolicy>> due) {
  // Every due replica at once, each within its timeout.
  std::vector<std::thread> threads;
  std::vector<char> ok(due.size(), 0);
  for (size_t i = 0; i < due.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto& [r, p] = due[i];
      const auto st = prober_ ? prober_(*r, p.probe_path, p.probe_timeout_ms)
                              : ProbeHttp(r->addr, r->port, p.probe_path, p.probe_timeout_ms);
      ok[i] = st.ok() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < due.size(); ++i) {
    auto& [r, p] = due[i];
    if (ok[i]) {
      if (!r->ready.exchange(true)) spdlog::info("replica {} at {}:{} is ready", r->job_id, r->addr, r->port);
      r->failures = 0;
    } else if (++r->failures >= static_cast<int>(p.failure_threshold) && r->ready.exchange(false)) {
      spdlog::warn("replica {} at {}:{} failed {} probes: out of rotation", r->job_id, r->addr,
                   r->port, r->failures);
    }
  }
}

absl::StatusOr<ServiceRoute> ServiceController::Route(const std::string& tenant,
                                                      const std::string& name) {
  std::lock_guard lock(mu_);
  for (const auto& [id, s] : services_) {
    if (s.rec.tenant == tenant && s.rec.spec.name() == name) return RouteLocked(id, s);
  }
  return absl::NotFoundError(StrCat("no service \"", name, "\""));
}

absl::StatusOr<ServiceRoute> ServiceController::RouteById(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = services_.find(id);
  if (it == services_.end()) return absl::NotFoundError(StrCat("service ", id, " is not running"));
  return RouteLocked(id, it->second);
}

ServiceRoute ServiceController::RouteLocked(const std::string& id, const Service& s) {
  ServiceRoute route;
  route.id = id;
  route.name = s.rec.spec.name();
  route.tenant = s.rec.tenant;
  route.policy = s.policy;
  for (const auto& [rid, r] : s.replicas) route.replicas.push_back(r);
  return route;
}

void ServiceController::Describe(const std::string& service_id, v1::Service* out) {
  std::lock_guard lock(mu_);
  auto it = services_.find(service_id);
  if (it == services_.end()) return;
  uint32_t ready = 0;
  for (const auto& [id, r] : it->second.replicas) {
    auto* m = out->add_members();
    m->set_id(id);
    m->set_site(r->site);
    m->set_address(StrCat(r->addr, ":", r->port));
    m->set_ready(r->ready);
    m->set_in_flight(static_cast<uint32_t>(std::max(0, r->outstanding.load())));
    ready += r->ready ? 1 : 0;
  }
  out->mutable_replicas()->set_ready(ready);
  out->set_rps(it->second.rps);
}

std::vector<v1::ServiceAd> ServiceController::Advertised() {
  std::lock_guard lock(mu_);
  std::vector<v1::ServiceAd> out;
  for (const auto& [id, s] : services_) {
    v1::ServiceAd ad;
    ad.set_tenant(s.rec.tenant);
    ad.set_name(s.rec.spec.name());
    out.push_back(std::move(ad));
  }
  return out;
}

void ServiceController::CountRequest(const std::string& service_id) {
  std::lock_guard lock(mu_);
  counted_[service_id]++;
}

void ServiceController::Failed(const std::shared_ptr<Replica>& r) {
  if (r->ready.exchange(false)) {
    spdlog::warn("replica {} at {}:{} failed a request: out of rotation until a probe passes",
                 r->job_id, r->addr, r->port);
  }
  std::lock_guard lock(mu_);
  r->next_probe_ms = 0;  // probed again at the next pass
}

absl::Status ProbeHttp(const std::string& addr, uint32_t port, const std::string& path,
                       int64_t timeout_ms) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(addr, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("replica address \"", addr, "\" is not an IP"));
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, StrCat(addr, ":", port));
  req.set(http::field::user_agent, "fedgate-readiness");
  http::response_parser<http::string_body> res;
  res.body_limit(1 << 20);
  beast::flat_buffer buf;
  stream.async_connect(asio::ip::tcp::endpoint(ip, static_cast<uint16_t>(port)),
                       [&](boost::system::error_code e) {
                         if (e) {
                           ec = e;
                           return;
                         }
                         http::async_write(stream, req, [&](boost::system::error_code e2, size_t) {
                           if (e2) {
                             ec = e2;
                             return;
                           }
                           http::async_read(stream, buf, res,
                                            [&](boost::system::error_code e3, size_t) { ec = e3; });
                         });
                       });
  io.run();
  if (ec) return absl::UnavailableError(StrCat(addr, ":", port, path, ": ", ec.message()));
  const unsigned code = res.get().result_int();
  if (code / 100 != 2) return absl::UnavailableError(StrCat(addr, ":", port, path, ": HTTP ", code));
  return absl::OkStatus();
}

}  // namespace fedgate::gateway
