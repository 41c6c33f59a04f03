// The sections of the config file, parsed one by one (config_sections.cc);
// config.cc walks them in order. Internal to the config room.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "federation/inventory.h"
#include "federation/mig.h"
#include "gateway/config/config.h"
#include "gateway/config/yaml_walk.h"

namespace fedgate::gateway::config_sections {

// A path from the file, absolute, resolved against the config's folder.
std::string Resolve(const std::string& base_dir, const std::string& p);
federation::Node ParseNode(const YamlWalker& w, const YAML::Node& n, const std::string& path);
// A node's `mig:` map: GPU index -> slices (a profile, or {profile, uuid}).
std::map<uint32_t, std::vector<federation::MigSlice>> ParseMig(const YamlWalker& w, const YAML::Node& n,
                                                              const std::string& path);

// site and federation names
void ParseIdentity(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// listen:
void ParseListen(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// tls: the files must be readable; a CRL must hold one
void ParseTls(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// data_dir and inventory: (static nodes, or Slurm's)
void ParseInventory(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// peers:
void ParsePeers(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// accept_jobs_from and advertise:
void ParseAdvertise(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// bench:
void ParseBench(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// jobs: (the lease defaults to max(3s, 5 advertise intervals))
void ParseJobs(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// api:
void ParseApi(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// health:
void ParseHealth(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// queue:
void ParseQueue(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// pricing:
void ParsePricing(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// tenants: (this site governs their quota)
void ParseTenants(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// preemption:
void ParsePreemption(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// retention:
void ParseRetention(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// executor: (and that slurm goes with slurm)
void ParseExecutor(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// slurm:
void ParseSlurm(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// kubernetes:
void ParseKubernetes(const YAML::Node& root, const std::string& base_dir, const YamlWalker& w,
                     Config& c);
// datasets: and datasets_cache: (config_datasets.cc)
void ParseDatasets(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);
// executor.work_dir: its default, and never inside data_dir
void CheckWorkDir(const YAML::Node& root, [[maybe_unused]] const std::string& base_dir,
    const YamlWalker& w, Config& c);

}  // namespace fedgate::gateway::config_sections
