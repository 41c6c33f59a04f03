#include "gateway/ops/metrics.h"

#include <sstream>

namespace fedgate::gateway {

std::string Metrics::Key(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += "\"";
  }
  return out + "}";
}

void Metrics::Describe(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard lock(mu_);
  auto& f = families_[name];
  f.type = type;
  f.help = help;
}

void Metrics::Inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard lock(mu_);
  families_[name].series[Key(labels)] += by;
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  families_[name].series[Key(labels)] = value;
}

void Metrics::SetFamily(const std::string& name,
                        const std::vector<std::pair<Labels, double>>& series) {
  std::lock_guard lock(mu_);
  auto& f = families_[name].series;
  f.clear();
  for (const auto& [labels, value] : series) f[Key(labels)] = value;
}

void Metrics::Remove(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto f = families_.find(name);
  if (f != families_.end()) f->second.series.erase(Key(labels));
}

double Metrics::Get(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto s = f->second.series.find(Key(labels));
  return s == f->second.series.end() ? 0 : s->second;
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
  std::lock_guard lock(mu_);
  std::ostringstream out;
  out.precision(17);
  for (const auto& [name, f] : families_) {
    if (!f.help.empty()) out << "# HELP " << name << " " << f.help << "\n";
    out << "# TYPE " << name << " " << f.type << "\n";
    if (f.series.empty() && f.type == "counter") out << name << " 0\n";
    for (const auto& [labels, v] : f.series) out << name << labels << " " << v << "\n";
  }
  return out.str();
}

}  // namespace fedgate::gateway
