// A small Prometheus text-format registry (prometheus-cpp is not packaged in
// Debian 12): counters and gauges with labels, rendered on /metrics.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fedgate::gateway {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  void Describe(const std::string& name, const std::string& type, const std::string& help);
  void Inc(const std::string& name, const Labels& labels = {}, double by = 1);
  void Set(const std::string& name, const Labels& labels, double value);
  double Get(const std::string& name, const Labels& labels = {}) const;
  // Replaces every series of a family: series not given disappear (a
  // removed peer, an expired link), so /metrics stays bounded.
  void SetFamily(const std::string& name, const std::vector<std::pair<Labels, double>>& series);
  // Drops one series (e.g. a removed peer's counter).
  void Remove(const std::string& name, const Labels& labels);
  // Called before every render, to refresh gauges computed on demand.
  void OnScrape(std::function<void(Metrics&)> fn);
  std::string Render();

 private:
  static std::string Key(const Labels& labels);

  struct Family {
    std::string type = "untyped";
    std::string help;
    std::map<std::string, double> series;  // rendered label set -> value
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void(Metrics&)>> scrape_hooks_;
};

}  // namespace fedgate::gateway
