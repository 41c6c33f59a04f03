// The gateway's metrics on prometheus-cpp (Debian's prometheus-cpp-dev):
// counters, gauges and histograms by name and labels, rendered in the
// Prometheus text format on /metrics. Families are created on first use,
// with the help and type given to Describe; series can be removed (a peer,
// link or tenant that went), so the registry stays bounded.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace fedgate::gateway {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // `type`: "counter", "gauge" or "histogram" (then with its bucket bounds).
  void Describe(const std::string& name, const std::string& type, const std::string& help,
                std::vector<double> buckets = {});
  void Inc(const std::string& name, const Labels& labels = {}, double by = 1);
  // A gauge's value; on a counter, raises it to `value` (for totals kept
  // elsewhere and copied at scrape time).
  void Set(const std::string& name, const Labels& labels, double value);
  void Observe(const std::string& name, const Labels& labels, double value);
  // A counter's or gauge's value, a histogram's count; 0 when absent.
  double Get(const std::string& name, const Labels& labels = {}) const;
  // Replaces every series of a gauge family: series not given disappear.
  void SetFamily(const std::string& name, const std::vector<std::pair<Labels, double>>& series);
  // Drops one series (e.g. a removed peer's counter).
  void Remove(const std::string& name, const Labels& labels);
  // Called before every render, to refresh gauges computed on demand.
  void OnScrape(std::function<void(Metrics&)> fn);
  std::string Render();

 private:
  struct Fam;
  Fam& FamilyLocked(const std::string& name, const char* default_type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The series of a family, found by name and labels without rebuilding the
  // label map on every call (the submit path counts twice per call).
  struct Handle {
    prometheus::Counter* counter = nullptr;
    prometheus::Gauge* gauge = nullptr;
    prometheus::Histogram* histogram = nullptr;
  };
  static std::string HandleKey(const std::string& name, const Labels& labels);
  Handle& HandleLocked(const std::string& name, const Labels& labels, const char* default_type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::map<std::string, std::unique_ptr<Fam>> families_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Handle> handles_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(Metrics&)>> scrape_hooks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgate::gateway
