#include "gateway/ops/metrics.h"

#include <algorithm>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace fedgate::gateway {

struct Metrics::Fam {
  std::string type;
  std::string help;
  std::vector<double> buckets;
  prometheus::Family<prometheus::Counter>* counter = nullptr;
  prometheus::Family<prometheus::Gauge>* gauge = nullptr;
  prometheus::Family<prometheus::Histogram>* histogram = nullptr;
  std::set<std::map<std::string, std::string>> series;  // label sets added
  bool placeholder = false;  // a described counter shows 0 until first counted
};

namespace {

std::map<std::string, std::string> ToMap(const Labels& labels) {
  return {labels.begin(), labels.end()};
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {}

Metrics::~Metrics() = default;

void Metrics::Describe(const std::string& name, const std::string& type, const std::string& help,
                       std::vector<double> buckets) {
  std::lock_guard lock(mu_);
  auto& f = families_[name];
  if (!f) f = std::make_unique<Fam>();
  // A family already built keeps its type and help (prometheus-cpp's are fixed).
  if (f->counter || f->gauge || f->histogram) return;
  f->type = type;
  f->help = help;
  f->buckets = std::move(buckets);
  // Built now, so that /metrics lists it (and a counter reads 0) before its
  // first event.
  Fam& built = FamilyLocked(name, type.c_str());
  if (built.counter && built.series.empty()) {
    built.counter->Add({});
    built.placeholder = true;
  }
}

Metrics::Fam& Metrics::FamilyLocked(const std::string& name, const char* default_type) {
  auto& f = families_[name];
  if (!f) f = std::make_unique<Fam>();
  if (f->type.empty()) f->type = default_type;
  if (!f->counter && !f->gauge && !f->histogram) {
    if (f->type == "counter") {
      f->counter = &prometheus::BuildCounter().Name(name).Help(f->help).Register(*registry_);
    } else if (f->type == "histogram") {
      f->histogram = &prometheus::BuildHistogram().Name(name).Help(f->help).Register(*registry_);
    } else {
      f->gauge = &prometheus::BuildGauge().Name(name).Help(f->help).Register(*registry_);
    }
  }
  return *f;
}

std::string Metrics::HandleKey(const std::string& name, const Labels& labels) {
  // Sorted as prometheus-cpp's label sets are: one key per series, whatever
  // order a caller names the labels in.
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key = name;
  for (const auto& [k, v] : sorted) {
    key += '\0';
    key += k;
    key += '\0';
    key += v;
  }
  return key;
}

Metrics::Handle& Metrics::HandleLocked(const std::string& name, const Labels& labels,
                                       const char* default_type) {
  const std::string key = HandleKey(name, labels);
  auto it = handles_.find(key);
  if (it != handles_.end()) return it->second;
  auto& f = FamilyLocked(name, default_type);
  const auto l = ToMap(labels);
  if (f.placeholder && !l.empty()) {
    // The first real series: the unlabeled 0 goes.
    f.counter->Remove(&f.counter->Add({}));
    handles_.erase(HandleKey(name, {}));
  }
  f.placeholder = false;
  f.series.insert(l);
  Handle h;
  if (f.counter) h.counter = &f.counter->Add(l);
  if (f.gauge) h.gauge = &f.gauge->Add(l);
  if (f.histogram) h.histogram = &f.histogram->Add(l, f.buckets);
  return handles_[key] = h;
}

void Metrics::Inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard lock(mu_);
  Handle& h = HandleLocked(name, labels, "counter");
  if (h.counter) h.counter->Increment(by);
  if (h.gauge) h.gauge->Increment(by);
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Handle& h = HandleLocked(name, labels, "gauge");
  if (h.gauge) h.gauge->Set(value);
  if (h.counter && value > h.counter->Value()) h.counter->Increment(value - h.counter->Value());
}

void Metrics::Observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Handle& h = HandleLocked(name, labels, "histogram");
  if (h.histogram) h.histogram->Observe(value);
}

double Metrics::Get(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  const Fam& f = *it->second;
  const auto l = ToMap(labels);
  if (!f.series.contains(l)) return 0;
  if (f.counter) return f.counter->Add(l).Value();
  if (f.gauge) return f.gauge->Add(l).Value();
  if (f.histogram) {
    const auto m = f.histogram->Add(l, f.buckets).Collect();
    return static_cast<double>(m.histogram.sample_count);
  }
  return 0;
}

void Metrics::SetFamily(const std::string& name,
                        const std::vector<std::pair<Labels, double>>& series) {
  std::lock_guard lock(mu_);
  auto& f = FamilyLocked(name, "gauge");
  if (!f.gauge) return;
  std::set<std::map<std::string, std::string>> keep;
  for (const auto& [labels, value] : series) {
    const auto l = ToMap(labels);
    keep.insert(l);
    f.gauge->Add(l).Set(value);
  }
  for (const auto& l : f.series) {
    if (keep.contains(l)) continue;
    f.gauge->Remove(&f.gauge->Add(l));
    handles_.erase(HandleKey(name, Labels(l.begin(), l.end())));
  }
  f.series = std::move(keep);
}

void Metrics::Remove(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  Fam& f = *it->second;
  const auto l = ToMap(labels);
  if (!f.series.erase(l)) return;
  if (f.counter) f.counter->Remove(&f.counter->Add(l));
  if (f.gauge) f.gauge->Remove(&f.gauge->Add(l));
  if (f.histogram) f.histogram->Remove(&f.histogram->Add(l, f.buckets));
  handles_.erase(HandleKey(name, labels));
}

void Metrics::OnScrape(std::function<void(Metrics&)> fn) {
  std::lock_guard lock(mu_);
  scrape_hooks_.push_back(std::move(fn));
}

std::string Metrics::Render() {
  std::vector<std::function<void(Metrics&)>> hooks;
  {
    std::lock_guard lock(mu_);
    hooks = scrape_hooks_;
  }
  for (auto& h : hooks) h(*this);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fedgate::gateway
