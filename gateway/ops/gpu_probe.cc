#include "gateway/ops/gpu_probe.h"

#include <dlfcn.h>

#include <charconv>
#include <chrono>

#include "base/number.h"
#include "base/str_cat.h"
#include "base/text.h"
#include "gateway/exec/run_command.h"
#include "gateway/ops/metrics.h"
#include "spdlog/spdlog.h"

namespace fedgate::gateway {
namespace {

bool ParseSmiNumber(std::string_view s, double* out) {
  const auto v = ParseDouble(Trim(s));
  if (v) *out = *v;
  return v.has_value();
}

}  // namespace

absl::StatusOr<std::vector<GpuSample>> ParseNvidiaSmi(std::string_view text) {
  std::vector<GpuSample> out;
  int line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    line = Trim(line);
    if (line.empty()) continue;
    const std::vector<std::string_view> f = Split(line, ',');
    if (f.size() != 5) {
      return absl::InvalidArgumentError(
          StrCat("nvidia-smi line ", line_no, ": want 5 fields, got ", f.size()));
    }
    GpuSample s;
    double index = 0;
    if (!ParseSmiNumber(f[0], &index) || index < 0) {
      return absl::InvalidArgumentError(StrCat("nvidia-smi line ", line_no, ": bad index"));
    }
    s.index = static_cast<uint32_t>(index);
    s.uuid = std::string(Trim(f[1]));
    double used = 0, total = 0, util = 0;
    const bool got_used = ParseSmiNumber(f[2], &used), got_total = ParseSmiNumber(f[3], &total);
    const bool got_util = ParseSmiNumber(f[4], &util);
    if (got_used) s.memory_used_bytes = used * 1024 * 1024;
    if (got_total) s.memory_total_bytes = total * 1024 * 1024;
    if (got_util) s.utilization_percent = util;
    // "[N/A]" is a field the GPU does not support; anything else unreadable
    // ("[GPU is lost]", "ERR!", "[Unknown Error]") means the GPU is sick.
    for (size_t i = 2; i < 5; ++i) {
      const std::string_view v = Trim(f[i]);
      double ignored;
      if (!ParseSmiNumber(v, &ignored) && v != "[N/A]" && v != "[Not Supported]") {
        s.ok = false;
        s.reason = StrCat("nvidia-smi reports \"", v.substr(0, 64), "\"");
        break;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// NVML's C API, declared here (its ABI is stable) so no NVIDIA header is
// needed at build time.
struct Nvml::Api {
  using Ret = int;
  using Device = void*;
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Utilization {
    unsigned int gpu, memory;
  };
  void* lib = nullptr;
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  Ret (*count)(unsigned int*) = nullptr;
  Ret (*handle)(unsigned int, Device*) = nullptr;
  Ret (*memory)(Device, Memory*) = nullptr;
  Ret (*utilization)(Device, Utilization*) = nullptr;
  Ret (*uuid)(Device, char*, unsigned int) = nullptr;
  const char* (*error)(Ret) = nullptr;
  static constexpr Ret kSuccess = 0, kNotSupported = 3;
  std::string Error(Ret r) const { return error != nullptr ? error(r) : StrCat("NVML error ", r); }
};

std::unique_ptr<Nvml> Nvml::Load() {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) return nullptr;
  auto sym = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(api->lib, name));
    return *fn != nullptr;
  };
  const bool all = sym(&api->init, "nvmlInit_v2") && sym(&api->shutdown, "nvmlShutdown") &&
                   sym(&api->count, "nvmlDeviceGetCount_v2") &&
                   sym(&api->handle, "nvmlDeviceGetHandleByIndex_v2") &&
                   sym(&api->memory, "nvmlDeviceGetMemoryInfo") &&
                   sym(&api->utilization, "nvmlDeviceGetUtilizationRates") &&
                   sym(&api->uuid, "nvmlDeviceGetUUID") && sym(&api->error, "nvmlErrorString");
  if (!all || api->init() != Api::kSuccess) {
    spdlog::warn("libnvidia-ml.so.1 found but NVML did not initialise; not using it");
    dlclose(api->lib);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(api_->lib);
}

absl::StatusOr<std::vector<GpuSample>> Nvml::Sample() {
  unsigned int n = 0;
  if (auto r = api_->count(&n); r != Api::kSuccess) {
    return absl::UnavailableError(StrCat("nvmlDeviceGetCount: ", api_->Error(r)));
  }
  std::vector<GpuSample> out;
  for (unsigned int i = 0; i < n; ++i) {
    GpuSample s;
    s.index = i;
    Api::Device dev = nullptr;
    if (auto r = api_->handle(i, &dev); r != Api::kSuccess) {
      s.ok = false;
      s.reason = StrCat("NVML: ", api_->Error(r));
      out.push_back(std::move(s));
      continue;
    }
    char uuid[96] = {0};
    if (api_->uuid(dev, uuid, sizeof uuid) == Api::kSuccess) s.uuid = uuid;
    Api::Memory mem{};
    if (auto r = api_->memory(dev, &mem); r == Api::kSuccess) {
      s.memory_used_bytes = static_cast<double>(mem.used);
      s.memory_total_bytes = static_cast<double>(mem.total);
    } else if (r != Api::kNotSupported) {
      s.ok = false;
      s.reason = StrCat("NVML memory info: ", api_->Error(r));
    }
    Api::Utilization util{};
    if (auto r = api_->utilization(dev, &util); r == Api::kSuccess) {
      s.utilization_percent = util.gpu;
    } else if (r != Api::kNotSupported && s.ok) {
      s.ok = false;
      s.reason = StrCat("NVML utilization: ", api_->Error(r));
    }
    out.push_back(std::move(s));
  }
  return out;
}

GpuHealthProbe::GpuHealthProbe(Options opts, Metrics* metrics, Apply apply)
    : opts_(std::move(opts)), metrics_(metrics), apply_(std::move(apply)) {
  if (!opts_.command.empty()) {
    kind_ = "command";
  } else if (opts_.local_node.empty()) {
    kind_ = "none";
  } else if (opts_.try_nvml && (nvml_ = Nvml::Load()) != nullptr) {
    kind_ = "nvml";
  } else if (opts_.try_nvidia_smi && RunCommand({"nvidia-smi", "-L"}, 5000).ok()) {
    kind_ = "nvidia-smi";
  }
  if (kind_ == "none") {
    spdlog::info("no GPU health probe (no health.command, NVML or nvidia-smi{}): GPUs count as "
                 "healthy",
                 opts_.local_node.empty() ? " for a node named like this host" : "");
  } else {
    spdlog::info("GPU health probe: {} every {} ms", kind_, opts_.interval_ms);
  }
  if (metrics_ != nullptr) {
    metrics_->Describe("fedgate_gpu_healthy", "gauge",
                       "1 when the site's GPU passes its health probe, 0 while it is withdrawn.");
    metrics_->Describe("fedgate_gpu_health_probe_runs_total", "counter",
                       "GPU health probe rounds by result (ok, error, timeout).");
    metrics_->Describe("nvidia_gpu_memory_used_bytes", "gauge", "GPU memory used (NVML/nvidia-smi).");
    metrics_->Describe("nvidia_gpu_memory_total_bytes", "gauge", "GPU memory (NVML/nvidia-smi).");
    metrics_->Describe("nvidia_gpu_duty_cycle", "gauge",
                       "Percent of time the GPU was busy over the last sample period.");
    Export();
  }
}

GpuHealthProbe::~GpuHealthProbe() { Stop(); }

void GpuHealthProbe::Start() {
  if (kind_ == "none" || thread_.joinable()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      (void)RunOnce();
      lock.lock();
      stop_cv_.wait_for(lock, std::chrono::milliseconds(opts_.interval_ms), [this] { return stop_; });
    }
  });
}

void GpuHealthProbe::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<federation::GpuHealthReport> GpuHealthProbe::FromSamples(
    const std::vector<GpuSample>& samples) {
  std::vector<federation::GpuHealthReport> out;
  const auto node = opts_.nodes.find(opts_.local_node);
  for (const auto& s : samples) {
    if (node == opts_.nodes.end() || s.index >= node->second) continue;
    out.push_back({opts_.local_node, s.index, s.ok, s.reason});
  }
  return out;
}

absl::StatusOr<std::vector<federation::GpuHealthReport>> GpuHealthProbe::Probe() {
  if (kind_ == "command") {
    auto r = RunCommand({"/bin/sh", "-c", opts_.command}, opts_.interval_ms);
    if (r.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(StrCat("health.command did not finish within ",
                                                opts_.interval_ms, " ms (the interval) and was killed"));
    }
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      return absl::UnavailableError(StrCat("health.command exited with ", r->exit_code, ": ",
                                           Trim(r->err.substr(0, 256))));
    }
    return federation::ParseHealthOutput(r->out, opts_.nodes);
  }
  absl::StatusOr<std::vector<GpuSample>> samples;
  if (kind_ == "nvml") {
    samples = nvml_->Sample();
  } else if (kind_ == "nvidia-smi") {
    auto r = RunCommand({"nvidia-smi",
                         "--query-gpu=index,uuid,memory.used,memory.total,utilization.gpu",
                         "--format=csv,noheader,nounits"},
                        opts_.interval_ms);
    if (!r.ok()) return r.status();
    if (r->exit_code != 0 && r->out.empty()) {
      return absl::UnavailableError(StrCat("nvidia-smi exited with ", r->exit_code));
    }
    samples = ParseNvidiaSmi(r->out);
  } else {
    return std::vector<federation::GpuHealthReport>{};
  }
  if (!samples.ok()) return samples.status();
  last_samples_ = *samples;
  return FromSamples(*samples);
}

absl::StatusOr<std::vector<federation::GpuHealthReport>> GpuHealthProbe::RunOnce() {
  std::lock_guard lock(mu_);
  auto reports = Probe();
  if (!reports.ok()) {
    // A broken or hung probe changes nothing: withdrawing every GPU because
    // a script has a typo would empty the site.
    spdlog::warn("GPU health probe ({}) failed, nothing changed: {}", kind_,
                 std::string(reports.status().message()));
    if (metrics_ != nullptr) {
      const bool timeout = reports.status().code() == absl::StatusCode::kDeadlineExceeded;
      metrics_->Inc("fedgate_gpu_health_probe_runs_total", {{"result", timeout ? "timeout" : "error"}});
    }
    return reports.status();
  }
  auto changes = health_.Apply(*reports);
  for (const auto& c : changes) {
    if (c.ok) {
      spdlog::info("GPU {}:{} passes its health check again: back in the ad", c.node, c.gpu);
    } else {
      spdlog::warn("GPU {}:{} failed its health check ({}): withdrawn", c.node, c.gpu,
                   c.reason.empty() ? "no reason given" : c.reason);
    }
  }
  if (!changes.empty() && apply_) apply_(health_.FailedByNode(), changes);
  if (metrics_ != nullptr) {
    metrics_->Inc("fedgate_gpu_health_probe_runs_total", {{"result", "ok"}});
    Export();
  }
  return reports;
}

void GpuHealthProbe::Export() {
  std::vector<std::pair<Labels, double>> healthy;
  for (const auto& [node, n] : opts_.nodes) {
    for (uint32_t i = 0; i < n; ++i) {
      healthy.push_back({{{"node", node}, {"gpu", std::to_string(i)}},
                         health_.Failed(node, i) ? 0.0 : 1.0});
    }
  }
  metrics_->SetFamily("fedgate_gpu_healthy", healthy);
  std::vector<std::pair<Labels, double>> used, total, duty;
  for (const auto& s : last_samples_) {
    Labels l{{"node", opts_.local_node}, {"gpu", std::to_string(s.index)}, {"uuid", s.uuid}};
    if (s.memory_used_bytes >= 0) used.push_back({l, s.memory_used_bytes});
    if (s.memory_total_bytes >= 0) total.push_back({l, s.memory_total_bytes});
    if (s.utilization_percent >= 0) duty.push_back({l, s.utilization_percent});
  }
  metrics_->SetFamily("nvidia_gpu_memory_used_bytes", used);
  metrics_->SetFamily("nvidia_gpu_memory_total_bytes", total);
  metrics_->SetFamily("nvidia_gpu_duty_cycle", duty);
}

}  // namespace fedgate::gateway
