#include "gateway/exec/slurm.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <sstream>

#include "base/number.h"
#include "base/str_cat.h"
#include "base/text.h"
#include "gateway/exec/run_command.h"

namespace fedgate::gateway {
namespace {

constexpr int64_t kQueryMs = 5000;
constexpr int64_t kAllocMs = 15000;

// "gpu:a100:4" or "gpu:a100:2(IDX:0-1)" or "gpu:4" -> (type, count).
std::pair<std::string, uint32_t> GpuGres(const std::string& field) {
  for (const auto& entry : Split(field, ',')) {
    std::string e(entry);
    if (auto p = e.find('('); p != std::string::npos) e = e.substr(0, p);
    auto parts = Split(e, ':');
    if (parts.empty() || parts[0] != "gpu") continue;
    std::string type = parts.size() >= 3 ? std::string(parts[1]) : "";
    // A count Slurm wrote that is not a number, or does not fit, offers none.
    return {type, ParseNumber<uint32_t>(parts.back()).value_or(0)};
  }
  return {"", 0};
}

}  // namespace

bool SlurmNode::usable() const {
  for (const char* bad : {"DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "FUTURE", "INVAL", "*",
                          "MAINT", "REBOOT", "POWER"}) {
    if (state.find(bad) != std::string::npos) return false;
  }
  return !state.empty();
}

absl::StatusOr<std::vector<SlurmNode>> ParseScontrolNodes(const std::string& text) {
  std::vector<SlurmNode> out;
  int line_no = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    std::map<std::string, std::string> kv;
    for (const auto& word : Words(line, 4096)) {
      const std::string w(word);
      const size_t eq = w.find('=');
      if (eq == std::string::npos || eq == 0) continue;  // "OS=Linux 6.1 #1 SMP" spills words
      kv[w.substr(0, eq)] = w.substr(eq + 1);
    }
    if (!kv.contains("NodeName")) {
      return absl::InvalidArgumentError(
          StrCat("scontrol line ", line_no, ": no NodeName= in \"", line.substr(0, 80), "\""));
    }
    SlurmNode n;
    n.name = kv["NodeName"];
    n.addr = kv.contains("NodeAddr") ? kv["NodeAddr"] : n.name;
    n.state = kv["State"];
    auto [type, gpus] = GpuGres(kv["Gres"]);
    n.gres_type = type;
    n.gpus = gpus;
    n.used = GpuGres(kv["GresUsed"]).second;
    for (const auto& p : Split(kv["Partitions"], ',')) n.partitions.emplace_back(p);
    out.push_back(std::move(n));
  }
  return out;
}

std::optional<uint64_t> ParseSallocJobId(const std::string& text) {
  static const std::string kGranted = "Granted job allocation ";
  const size_t at = text.find(kGranted);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + kGranted.size();
  const size_t to = text.find_first_not_of("0123456789", from);
  if (to == from) return std::nullopt;
  return ParseNumber<uint64_t>(std::string_view(text).substr(from, to == std::string::npos ? std::string::npos : to - from));
}

SlurmCluster::SlurmCluster(SlurmConfig config) : config_(std::move(config)) {
  // Every Slurm client this process starts (and the ranks' srun) reads it;
  // set once, at start, before any thread.
  if (!config_.conf.empty()) ::setenv("SLURM_CONF", config_.conf.c_str(), 1);
}

std::vector<std::pair<std::string, std::string>> SlurmCluster::ClientEnv() const {
  if (config_.conf.empty()) return {};
  return {{"SLURM_CONF", config_.conf}};
}

absl::Status SlurmCluster::Refresh() {
  auto r = RunCommand({"scontrol", "-d", "show", "node", "-o"}, kQueryMs);
  absl::Status st;
  if (!r.ok()) {
    st = r.status();
  } else if (r->exit_code != 0) {
    st = absl::UnavailableError(StrCat("slurm: scontrol failed: ", Trim(r->err.substr(0, 300))));
  }
  std::vector<SlurmNode> mine;
  if (st.ok()) {
    auto parsed = ParseScontrolNodes(r->out);
    if (!parsed.ok()) {
      st = parsed.status();
    } else {
      for (auto& n : *parsed) {
        bool in = config_.partition.empty();
        for (const auto& p : n.partitions) in = in || p == config_.partition;
        if (in) mine.push_back(std::move(n));
      }
    }
  }
  std::lock_guard lock(mu_);
  if (!st.ok()) {
    if (last_error_ != st.message()) spdlog::warn("slurm: {}", std::string(st.message()));
    last_error_ = std::string(st.message());
    return st;
  }
  last_error_.clear();
  nodes_ = std::move(mine);
  return absl::OkStatus();
}

std::vector<SlurmNode> SlurmCluster::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

std::string SlurmCluster::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

std::vector<federation::Node> SlurmCluster::InventoryNodes() const {
  std::lock_guard lock(mu_);
  std::vector<federation::Node> out;
  for (const auto& s : nodes_) {
    if (!s.usable() || s.gpus == 0) continue;
    federation::Node n;
    n.name = s.name;
    n.address = s.addr;
    auto m = config_.gpu_models.find(s.gres_type);
    n.gpu_model = m != config_.gpu_models.end() ? m->second
                                                : (s.gres_type.empty() ? "GPU" : s.gres_type);
    n.gpus = s.gpus;
    out.push_back(std::move(n));
  }
  return out;
}

std::string SlurmCluster::GresType(const std::string& node) const {
  std::lock_guard lock(mu_);
  for (const auto& n : nodes_) {
    if (n.name == node) return n.gres_type;
  }
  return "";
}

absl::StatusOr<uint64_t> SlurmCluster::Allocate(const std::string& name, const std::string& node,
                                                uint32_t gpus, const std::string& tenant,
                                                uid_t uid, gid_t gid, bool switch_user) {
  const std::string type = GresType(node);
  std::vector<std::string> argv = {"salloc", "--no-shell", "--immediate=2", "-J", name,
                                   "-w", node, "-N", "1", "-n", std::to_string(gpus),
                                   StrCat("--gres=gpu:", type.empty() ? "" : type + ":", gpus)};
  if (!config_.partition.empty()) argv.push_back("--partition=" + config_.partition);
  if (auto a = config_.accounts.find(tenant); a != config_.accounts.end()) {
    argv.push_back("--account=" + a->second);
  }
  if (switch_user) {
    // The allocation is the rank user's, so its steps may run as that user.
    argv.push_back(StrCat("--uid=", uid));
    argv.push_back(StrCat("--gid=", gid));
  }
  auto r = RunCommand(argv, kAllocMs);
  if (!r.ok()) return absl::UnavailableError(StrCat("slurm: salloc: ", r.status().message()));
  auto id = ParseSallocJobId(r->err + r->out);
  if (r->exit_code != 0 || !id) {
    return absl::UnavailableError(
        StrCat("slurm refused the allocation on ", node, ": ",
               Trim((r->err.empty() ? r->out : r->err).substr(0, 300))));
  }
  return *id;
}

absl::Status SlurmCluster::Cancel(uint64_t job_id, const std::string& signal) {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(std::to_string(job_id));
  auto r = RunCommand(argv, kQueryMs);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnavailableError(StrCat("slurm: scancel ", job_id, ": ", Trim(r->err.substr(0, 300))));
  }
  return absl::OkStatus();
}

std::vector<std::string> SlurmCluster::StepArgv(uint64_t job_id, const std::string& node,
                                                const std::string& name,
                                                const std::vector<std::string>& command) const {
  const std::string type = GresType(node);
  std::vector<std::string> argv = {"srun", StrCat("--jobid=", job_id), "-w", node, "-N", "1",
                                   "-n", "1", "--exact", "--kill-on-bad-exit=0", "-J", name,
                                   StrCat("--gres=gpu:", type.empty() ? "" : type + ":", 1), "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace fedgate::gateway
