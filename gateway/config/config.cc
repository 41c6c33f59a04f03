// Loading the config file: the YAML parsed, then walked section by section
// (config_sections.cc); every error names the file, the line and the key.
#include "gateway/config/config.h"

#include "federation/mig.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_cat.h"
#include "federation/names.h"
#include "gateway/config/config_sections.h"

namespace fedgate::gateway {
namespace config_sections {

namespace fs = std::filesystem;

std::string Resolve(const std::string& base_dir, const std::string& p) {
  fs::path path(p);
  if (path.is_absolute() || base_dir.empty()) return path.lexically_normal().string();
  return (fs::path(base_dir) / path).lexically_normal().string();
}

federation::Node ParseNode(const YamlWalker& w, const YAML::Node& n, const std::string& path) {
  w.ExpectKeys(n, path,
               {"name", "address", "gpu_model", "gpu_memory_gib", "gpus", "rdma", "nic_gbps",
                "labels", "mig"});
  federation::Node node;
  for (const char* req : {"name", "address", "gpu_model", "gpus"}) {
    if (!n[req]) w.Fail(n, StrCat("missing required key \"", path, ".", req, "\""));
  }
  node.name = w.Str(n["name"], path + ".name");
  if (!federation::IsValidName(node.name)) {
    w.Fail(n["name"], StrCat("\"", path, ".name\": invalid node name \"", node.name,
                                   "\" (want 1-63 of [a-z0-9-])"));
  }
  node.address = w.Str(n["address"], path + ".address");
  if (node.address.empty()) w.Fail(n["address"], StrCat("\"", path, ".address\" is empty"));
  node.gpu_model = w.Str(n["gpu_model"], path + ".gpu_model");
  if (node.gpu_model.empty()) {
    w.Fail(n["gpu_model"], StrCat("\"", path, ".gpu_model\" is empty"));
  }
  int64_t gpus = w.Scalar<int64_t>(n["gpus"], path + ".gpus", "an integer");
  if (gpus <= 0 || gpus > 4096) {
    w.Fail(n["gpus"], StrCat("\"", path, ".gpus\" must be between 1 and 4096, got ", gpus));
  }
  node.gpus = static_cast<uint32_t>(gpus);
  if (n["gpu_memory_gib"]) {
    int64_t mem = w.Scalar<int64_t>(n["gpu_memory_gib"], path + ".gpu_memory_gib", "an integer");
    if (mem < 0) w.Fail(n["gpu_memory_gib"], StrCat("\"", path, ".gpu_memory_gib\" < 0"));
    node.gpu_memory_gib = static_cast<uint32_t>(mem);
  }
  if (n["rdma"]) node.rdma = w.Scalar<bool>(n["rdma"], path + ".rdma", "true or false");
  if (n["nic_gbps"]) {
    node.nic_gbps = w.Scalar<double>(n["nic_gbps"], path + ".nic_gbps", "a number");
    if (node.nic_gbps < 0) w.Fail(n["nic_gbps"], StrCat("\"", path, ".nic_gbps\" < 0"));
  }
  if (n["labels"]) {
    const auto& labels = n["labels"];
    if (!labels.IsMap()) w.Fail(labels, StrCat("\"", path, ".labels\" must be a mapping"));
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      node.labels[it->first.as<std::string>()] =
          w.Str(it->second, StrCat(path, ".labels.", it->first.as<std::string>()));
    }
  }
  return node;
}

std::map<uint32_t, std::vector<federation::MigSlice>> ParseMig(const YamlWalker& w, const YAML::Node& n,
                                                              const std::string& path) {
  std::map<uint32_t, std::vector<federation::MigSlice>> out;
  if (!n.IsMap()) {
    w.Fail(n, StrCat("\"", path, "\" must map GPU indices to lists of MIG profiles, or be nvidia-smi"));
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string gpu_path = StrCat(path, ".", it->first.as<std::string>());
    const int64_t gpu = w.Scalar<int64_t>(it->first, gpu_path, "a GPU index");
    if (gpu < 0 || gpu > 4095) w.Fail(it->first, StrCat("\"", gpu_path, "\": GPU index out of range"));
    const YAML::Node list = it->second;
    if (!list.IsSequence()) w.Fail(list, StrCat("\"", gpu_path, "\" must be a list of profiles"));
    auto& slices = out[static_cast<uint32_t>(gpu)];
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node e = list[i];
      const std::string at = StrCat(gpu_path, "[", i, "]");
      federation::MigSlice slice;
      if (e.IsMap()) {  // {profile, uuid}
        w.ExpectKeys(e, at, {"profile", "uuid"});
        if (!e["profile"]) w.Fail(e, StrCat("missing required key \"", at, ".profile\""));
        slice.profile = w.Str(e["profile"], at + ".profile");
        if (e["uuid"]) slice.uuid = w.Str(e["uuid"], at + ".uuid");
      } else {
        slice.profile = w.Str(e, at);
      }
      slices.push_back(std::move(slice));
    }
  }
  return out;
}

}  // namespace config_sections

namespace {

namespace fs = std::filesystem;

Config Walk(const YAML::Node& root, const std::string& base_dir, const YamlWalker& w) {
  using namespace config_sections;  // NOLINT: the sections of this file
  Config c;
  ParseIdentity(root, base_dir, w, c);
  ParseListen(root, base_dir, w, c);
  ParseTls(root, base_dir, w, c);
  ParseInventory(root, base_dir, w, c);
  ParsePeers(root, base_dir, w, c);
  ParseAdvertise(root, base_dir, w, c);
  ParseBench(root, base_dir, w, c);
  ParseJobs(root, base_dir, w, c);
  ParseApi(root, base_dir, w, c);
  ParseHealth(root, base_dir, w, c);
  ParseQueue(root, base_dir, w, c);
  ParsePricing(root, base_dir, w, c);
  ParseTenants(root, base_dir, w, c);
  ParsePreemption(root, base_dir, w, c);
  ParseRetention(root, base_dir, w, c);
  ParseExecutor(root, base_dir, w, c);
  ParseSlurm(root, base_dir, w, c);
  ParseKubernetes(root, base_dir, w, c);
  CheckWorkDir(root, base_dir, w, c);
  ParseDatasets(root, base_dir, w, c);
  return c;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir,
                                   const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ": malformed YAML: ", e.msg));
  }
  try {
    return Walk(root, base_dir, YamlWalker(source));
  } catch (const YamlError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(StrCat("cannot read config file ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string dir = fs::absolute(fs::path(path)).parent_path().string();
  auto c = ParseConfig(ss.str(), dir, path);
  if (c.ok()) c->path = path;
  return c;
}

}  // namespace fedgate::gateway
