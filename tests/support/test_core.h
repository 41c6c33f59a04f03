// A real GatewayCore on a real store, for unit tests: site-a with one node of
// two A100-80GB GPUs, a FakeClock, placeholder TLS files (the core never
// reads them).
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "federation/inventory.h"
#include "gateway/config/config.h"
#include "gateway/ops/metrics.h"
#include "gateway/peering/core.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/make_link.h"
#include "tests/support/temp_dir.h"

namespace fedgate::testing {

struct TestCore {
  TempDir dir;
  FakeClock clock;
  gateway::Metrics metrics;
  std::unique_ptr<gateway::Store> store;
  std::unique_ptr<gateway::GatewayCore> core;

  // Call with ASSERT_NO_FATAL_FAILURE; `link_max_age` as in bench.link_max_age.
  void Start(const std::string& link_max_age) {
    for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) std::ofstream(dir / f) << "x";
    auto cfg = gateway::ParseConfig(
        "site: site-a\nfederation: aidc\nlisten: {grpc: 127.0.0.1:1}\n"
        "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\ndata_dir: data\n"
        "inventory:\n  nodes:\n    - {name: a-n1, address: 127.0.0.1, gpu_model: A100-80GB, "
        "gpus: 2}\nbench: {link_max_age: " + link_max_age + "}\n",
        dir.path(), "fedgate.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    auto opened = gateway::Store::Open(cfg->data_dir);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store = std::move(*opened);
    core = std::make_unique<gateway::GatewayCore>(
        *cfg, &clock, store.get(), std::make_unique<federation::StaticInventory>(cfg->nodes),
        &metrics);
    ASSERT_TRUE(core->Init().ok());
  }
};

}  // namespace fedgate::testing
