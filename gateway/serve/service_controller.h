// Keeps each service's replicas running (docs/services.md): one thread at the
// coordinator that, every second, submits replica jobs up to the service's
// desired count, cancels those above it and those of ended services, probes
// the running replicas' readiness and runs the autoscaler. The proxy asks it
// which replicas are in rotation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "federation/autoscale.h"
#include "federation/clock.h"
#include "federation/service_spec.h"
#include "fedgate/v1/federation.pb.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

class JobManager;
class Metrics;

// One replica as the proxy sees it; shared with requests in flight.
struct Replica {
  std::string job_id;
  std::string service;  // its name
  std::string tenant;
  std::string site;
  std::string addr;
  uint32_t port = 0;
  uint64_t epoch = 0;
  std::atomic<bool> ready{false};
  std::atomic<int> outstanding{0};
  int failures = 0;          // consecutive failed probes
  int64_t next_probe_ms = 0;
};

struct ServiceRoute {
  std::string id;
  std::string name;
  std::string tenant;
  federation::ServicePolicy policy;
  std::vector<std::shared_ptr<Replica>> replicas;  // running, ready or not
};

class ServiceController {
 public:
  ServiceController(JobStore* store, JobManager* jobs, const federation::Clock* clock,
                    Metrics* metrics, std::string site);
  ~ServiceController();
  // How a replica's readiness is probed: GET path within timeout_ms, OK on
  // a 2xx answer. Unset: straight to its address (ProbeHttp).
  using Prober = std::function<absl::Status(const Replica&, const std::string& path, int64_t timeout_ms)>;
  void SetProber(Prober p) { prober_ = std::move(p); }
  void Start();
  void Stop();
  // One reconcile pass (the thread runs it each second; tests call it).
  void Pass();

  // The tenant's running service `name`: NOT_FOUND when it has none.
  absl::StatusOr<ServiceRoute> Route(const std::string& tenant, const std::string& name);
  // The running service with this id (a bearer token's): NOT_FOUND if none.
  absl::StatusOr<ServiceRoute> RouteById(const std::string& id);
  // What only the controller knows of a service: ready replicas, the
  // members in rotation or starting, requests per second.
  void Describe(const std::string& service_id, v1::Service* out);
  // The services this gateway coordinates, for its ad (other gateways relay
  // their requests here).
  std::vector<v1::ServiceAd> Advertised();
  // A request arrived for the service (the autoscaler's input).
  void CountRequest(const std::string& service_id);
  // A replica failed a request (refused, reset): out of rotation until its
  // next probe passes.
  void Failed(const std::shared_ptr<Replica>& r);

 private:
  struct Service {
    JobRecord rec;
    federation::ServicePolicy policy;
    std::unique_ptr<federation::Autoscaler> scaler;
    int64_t next_tick_ms = 0;
    double rps = 0;
    std::map<std::string, std::shared_ptr<Replica>> replicas;  // by job id
  };
  void Loop();
  static ServiceRoute RouteLocked(const std::string& id, const Service& s);
  // Submits and cancels replica jobs toward the desired count.
  void Reconcile(const JobRecord& svc, const std::vector<JobRecord>& replicas, uint32_t desired);
  void CancelReplica(const JobRecord& r, const std::string& why);
  // The service's own record: state and reason from its replicas, and a
  // new desired count with the decision's story.
  void SaveService(JobRecord rec, uint32_t ready, uint32_t desired, const std::string& why);
  void Probe(std::vector<std::pair<std::shared_ptr<Replica>, federation::ServicePolicy>> due);

  JobStore* store_;
  JobManager* jobs_;
  const federation::Clock* clock_;
  Metrics* metrics_;
  std::string site_;
  Prober prober_;
  std::mutex mu_;
  std::map<std::string, Service> services_ ABSL_GUARDED_BY(mu_);  // by service id
  std::map<std::string, uint64_t> counted_ ABSL_GUARDED_BY(mu_);  // requests since last pass
  std::atomic<bool> stop_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::thread thread_;
};

// GET http://addr:port/path within timeout_ms: OK on a 2xx answer.
absl::Status ProbeHttp(const std::string& addr, uint32_t port, const std::string& path,
                       int64_t timeout_ms);

}  // namespace fedgate::gateway
