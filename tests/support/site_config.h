// The config of a site with one node for tests of a participant: node n1
// with `gpus` A100s, the data folder given.
#pragma once

#include <cstdint>
#include <string>

#include "gateway/config/config.h"

namespace fedgate::testing {

inline gateway::Config OneNodeSite(const std::string& site, const std::string& data_dir,
                                   uint32_t gpus, const std::string& address = "10.0.0.1") {
  gateway::Config c;
  c.site = site;
  c.data_dir = data_dir;
  federation::Node n;
  n.name = "n1";
  n.address = address;
  n.gpu_model = "A100";
  n.gpus = gpus;
  c.nodes = {n};
  return c;
}

}  // namespace fedgate::testing
