#include "gateway/config/config.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;
using testing::WriteText;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) WriteText(dir_ / f, "x");
  }
  absl::StatusOr<Config> Parse(const std::string& yaml) {
    return ParseConfig(yaml, dir_.path(), "fedgate.yaml");
  }
  static std::string Good(const std::string& extra = "") {
    return "site: cn-beijing\n"
           "federation: aidc\n"
           "listen:\n"
           "  grpc: 0.0.0.0:7443\n"
           "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\n"
           "inventory:\n"
           "  nodes:\n"
           "    - {name: bj-1, address: 10.0.0.11, gpu_model: A100-80GB, gpus: 8}\n" +
           extra;
  }
  void ExpectError(const std::string& yaml, const std::string& needle) {
    auto c = Parse(yaml);
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos)
        << "error was: " << c.status().message();
  }
  TempDir dir_;
};

TEST_F(ConfigTest, MinimalConfigGetsDefaults) {
  auto c = Parse(Good());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->site, "cn-beijing");
  EXPECT_EQ(c->listen.ops, "127.0.0.1:9090");
  EXPECT_EQ(c->advertise.interval_ms, 2000);
  EXPECT_EQ(c->advertise.ttl_ms, 10000);
  EXPECT_EQ(c->tls.ca, dir_ / "ca.pem") << "relative paths resolve from the config's folder";
  ASSERT_EQ(c->nodes.size(), 1u);
  EXPECT_EQ(c->nodes[0].gpus, 8u);
  EXPECT_FALSE(c->nodes[0].rdma);
}

TEST_F(ConfigTest, AcceptsEveryKeyOfTheDesignExample) {
  auto c = Parse(
      "site: cn-beijing\nfederation: aidc\n"
      "listen:\n  grpc: 0.0.0.0:7443\n  http: 127.0.0.1:8443\n  ops: 127.0.0.1:9090\n"
      "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\n"
      "data_dir: /var/lib/fedgate\n"
      "inventory:\n  source: static\n  nodes:\n"
      "    - {name: bj-1, address: 10.0.0.11, gpu_model: A100-80GB, gpu_memory_gib: 80, gpus: 8,\n"
      "       rdma: true, nic_gbps: 200, labels: {gpu-type: a100}}\n"
      "peers:\n  - {site: cn-shanghai, endpoint: sh.example:7443}\n"
      "advertise: {interval: 2s, ttl: 10s}\n"
      "bench: {probe_interval: 10m, probe_duration: 3s}\n"
      "executor: {kind: process, run_as: fedgate-rank, port_range: 30000-30099}\n"
      "retention: {logs: 7d, jobs: 30d}\n"
      "health: {command: /usr/local/bin/gpu-health, interval: 10s}\n"
      "pricing: {A100-80GB: {guaranteed: 2.50, spot: 0.90}}\n"
      "queue: {fair_share_half_life: 168h}\n"
      "tenants:\n  - {name: team-a, gpus: 16, models: {A100-80GB: 8}, borrow: 8, weight: 2}\n"
      "preemption: {grace: 30s, min_runtime: 0s}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_EQ(c->executor.port_lo, 30000u);
  EXPECT_EQ(c->executor.port_hi, 30099u);
  EXPECT_EQ(c->executor.work_dir, "/var/tmp/fedgate-work/cn-beijing");
  EXPECT_EQ(c->tenants[0].tenant, "team-a");
  EXPECT_EQ(c->tenants[0].gpus, 16u);
  EXPECT_EQ(c->tenants[0].models.at("A100-80GB"), 8u);
  EXPECT_EQ(c->tenants[0].borrow, 8u);
  EXPECT_DOUBLE_EQ(c->tenants[0].weight, 2);
  EXPECT_EQ(c->preemption.grace_ms, 30000);
  EXPECT_EQ(c->preemption.min_runtime_ms, 0);
  EXPECT_DOUBLE_EQ(c->pricing.at("A100-80GB").spot, 0.9);
  EXPECT_EQ(c->queue.fair_share_half_life_ms, 168LL * 3600 * 1000);
  EXPECT_EQ(c->health.command, "/usr/local/bin/gpu-health");
  EXPECT_EQ(c->health.interval_ms, 10000);
  EXPECT_EQ(c->retention.logs_ms, 7LL * 24 * 3600 * 1000);
  EXPECT_TRUE(c->nodes[0].rdma);
  EXPECT_EQ(c->nodes[0].labels.at("gpu-type"), "a100");
  EXPECT_EQ(c->peers[0].endpoint, "sh.example:7443");
  EXPECT_EQ(c->bench.probe_interval_ms, 600000);
  EXPECT_EQ(c->data_dir, "/var/lib/fedgate");
}

TEST_F(ConfigTest, TakeoverDefaultsToThreeLeasesAndRefusesTooShortATime) {
  auto c = Parse(Good("jobs: {lease: 4s}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->jobs.takeover_after_ms, 12000);
  EXPECT_EQ(c->jobs.takeover_stagger_ms, 4000);
  c = Parse(Good("jobs: {lease: 4s, takeover_after: 'off'}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->jobs.takeover_after_ms, 0) << "no takeover";
  c = Parse(Good("jobs: {lease: 4s, takeover_after: 20s, takeover_stagger: 5s}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->jobs.takeover_after_ms, 20000);
  EXPECT_EQ(c->jobs.takeover_stagger_ms, 5000);
  // A successor that asked within two leases could vote out a coordinator
  // that is only slow.
  c = Parse(Good("jobs: {lease: 4s, takeover_after: 5s}\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("jobs.takeover_after"), std::string::npos) << c.status();
  c = Parse(Good("jobs: {lease: 4s, takeover_stagger: 1s}\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("jobs.takeover_stagger"), std::string::npos) << c.status();
}

TEST_F(ConfigTest, UnknownKeysNameTheKeyAndLine) {
  ExpectError(Good("colour: blue\n"), "fedgate.yaml:9: unknown key \"colour\"");
  ExpectError(Good("advertise: {interval: 2s, ttll: 10s}\n"), "unknown key \"advertise.ttll\"");
  std::string typo = Good();
  typo.insert(typo.find("tls:"), "  grcp: h:2\n");
  ExpectError(typo, "fedgate.yaml:5: unknown key \"listen.grcp\"");
  ExpectError(Good().replace(Good().find("gpus: 8"), 7, "gpus: 8, colour: red"),
              "unknown key \"inventory.nodes[0].colour\"");
}

TEST_F(ConfigTest, SignedAdsRevocationAndReadTimeoutKeys) {
  auto with_crl = [](std::string yaml, const std::string& file) {
    const std::string tls = "key: key.pem}";
    return yaml.replace(yaml.find(tls), tls.size(), "key: key.pem, crl: " + file + "}");
  };
  auto c = Parse(Good());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->advertise.require_signed) << "signed ads are required by default";
  EXPECT_EQ(c->advertise.max_skew_ms, 30000);
  EXPECT_TRUE(c->tls.crl.empty());
  EXPECT_EQ(c->api.read_timeout_ms, 10000);
  WriteText(dir_ / "crl.pem", "-----BEGIN X509 CRL-----\nx\n-----END X509 CRL-----\n");
  c = Parse(with_crl(Good("advertise: {require_signed: false, max_clock_skew: 5s, endpoint: gw.bj:7443}\n"
                          "api: {read_timeout: 3s}\n"),
                     "crl.pem"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->advertise.require_signed);
  EXPECT_EQ(c->advertise.max_skew_ms, 5000);
  EXPECT_EQ(c->advertise.endpoint, "gw.bj:7443");
  EXPECT_EQ(c->tls.crl, dir_ / "crl.pem");
  EXPECT_EQ(c->api.read_timeout_ms, 3000);
  ExpectError(Good("advertise: {require_signed: maybe}\n"), "advertise.require_signed");
  ExpectError(Good("advertise: {endpoint: nowhere}\n"), "advertise.endpoint");
  ExpectError(with_crl(Good(), "missing.pem"), "\"tls.crl\": cannot read file");
  ExpectError(with_crl(Good(), "ca.pem"), "holds no PEM CRL");
}

TEST_F(ConfigTest, MissingRequiredKeys) {
  ExpectError("federation: aidc\n", "missing required key \"site\"");
  ExpectError(Good().replace(Good().find("gpu_model: A100-80GB, "), 22, ""),
              "missing required key \"inventory.nodes[0].gpu_model\"");
  ExpectError("", "empty");
}

TEST_F(ConfigTest, BadValuesNameTheKey) {
  ExpectError(Good().replace(Good().find("gpus: 8"), 7, "gpus: 0"),
              "\"inventory.nodes[0].gpus\" must be between 1 and 4096");
  ExpectError(Good().replace(Good().find("gpus: 8"), 7, "gpus: many"),
              "\"inventory.nodes[0].gpus\" must be an integer");
  ExpectError(Good().replace(Good().find("0.0.0.0:7443"), 12, "0.0.0.0"),
              "\"listen.grpc\": invalid endpoint");
  ExpectError(Good().replace(Good().find("0.0.0.0:7443"), 12, "0.0.0.0:99999"),
              "port out of range");
  ExpectError(Good("peers:\n  - {site: cn-sh, endpoint: nowhere}\n"),
              "\"peers[0].endpoint\": invalid endpoint");
  ExpectError(Good("advertise: {interval: 2s, ttl: 1s}\n"), "must be longer");
  ExpectError(Good("advertise: {interval: soon}\n"), "\"advertise.interval\": invalid duration");
  ExpectError(Good("executor: {kind: k8s}\n"), "unsupported executor \"k8s\"");
  ExpectError(Good().replace(0, 15, "site: CN Beijing"), "invalid site name");
  ExpectError(Good("health: {interval: 10ms}\n"), "\"health.interval\" must be at least 100ms");
  ExpectError(Good("health: {cmd: x}\n"), "unknown key \"health.cmd\"");
  ExpectError(Good("retention: {logs: forever}\n"), "\"retention.logs\": invalid duration");
  ExpectError(Good("pricing: {A100: {guaranteed: free}}\n"), "\"pricing.A100.guaranteed\" must be a number");
  ExpectError(Good("pricing: {A100: {gold: 1}}\n"), "unknown key \"pricing.A100.gold\"");
  ExpectError(Good("peers:\n  - {site: cn-beijing, endpoint: h:1}\n"), "this site itself");
  ExpectError(Good("tenants:\n  - {name: a, gpus: 2}\n  - {name: a, gpus: 3}\n"),
              "tenant \"a\" is listed twice");
  ExpectError(Good("tenants:\n  - {name: a, gpus: -1}\n"), "\"tenants[0].gpus\" must be between");
  ExpectError(Good("tenants:\n  - {name: a, gpus: 2, models: {A100: 3}}\n"),
              "models.A100 (3) exceeds its total of 2");
  ExpectError(Good("tenants:\n  - {name: a, gpus: 2, weight: 0}\n"), "weight must be a number > 0");
  ExpectError(Good("tenants:\n  - {name: a, gpus: 2, limit: 3}\n"), "unknown key \"tenants[0].limit\"");
  ExpectError(Good("preemption: {grace: never}\n"), "\"preemption.grace\": invalid duration");
  ExpectError(Good("executor: {port_range: 29999-29500}\n"), "\"executor.port_range\": want LO-HI");
  ExpectError(Good("executor: {kind: slurm}\n"), "go together");
  ExpectError(Good("slurm: {partition: gpu, nodes: 3}\n"), "unknown key \"slurm.nodes\"");
  ExpectError(Good("executor: {run_as: root}\n"), "ranks never run as root");
  ExpectError(Good("executor: {work_dir: /var/lib/fedgate/work}\n"), "must not be inside data_dir");
}

TEST_F(ConfigTest, DatasetsAndTheirCache) {
  auto c = Parse(Good("data_dir: /var/lib/fg\n"
                      "datasets:\n  - {name: imagenet-1k, path: /data/imagenet, version: v2}\n"
                      "  - {name: c4, path: rel/c4}\n"
                      "datasets_cache: {max: 2TB}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->datasets.size(), 2u);
  EXPECT_EQ(c->datasets[0].version, "v2");
  EXPECT_EQ(c->datasets[1].path, dir_ / "rel/c4");
  EXPECT_EQ(c->datasets_cache.path, "/var/lib/fg-datasets") << "beside data_dir, not in it";
  EXPECT_EQ(c->datasets_cache.max_bytes, 2'000'000'000'000ULL);
  ExpectError(Good("datasets:\n  - {name: ../x, path: /d}\n"), "is not a dataset name");
  ExpectError(Good("datasets:\n  - {name: a, path: /d}\n  - {name: a, path: /e}\n"),
              "listed twice");
  ExpectError(Good("datasets:\n  - {name: a}\n"), "datasets[0].path");
  ExpectError(Good("data_dir: /var/lib/fg\ndatasets:\n  - {name: a, path: /var/lib/fg/x}\n"),
              "overlaps data_dir");
  ExpectError(Good("datasets_cache: {max: lots}\n"), "datasets_cache.max");
  ExpectError(Good("data_dir: /var/lib/fg\ndatasets_cache: {path: /var/lib/fg/c}\n"),
              "must not be inside data_dir");
}

TEST_F(ConfigTest, MissingTlsFileIsNamed) {
  std::filesystem::remove(dir_ / "key.pem");
  ExpectError(Good(), "\"tls.key\": cannot read file");
}

TEST_F(ConfigTest, MalformedYamlHasALine) {
  ExpectError("site: a\nlisten: [unclosed\n", "fedgate.yaml:");
}

TEST_F(ConfigTest, MissingFile) {
  auto c = LoadConfig(dir_ / "nope.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("nope.yaml"), std::string::npos);
}

TEST_F(ConfigTest, DuplicateNodesAndPeers) {
  ExpectError(Good("    - {name: bj-1, address: 10.0.0.12, gpu_model: H100, gpus: 8}\n"),
              "duplicate node name \"bj-1\"");
  ExpectError(Good("peers:\n  - {site: x, endpoint: h:1}\n  - {site: x, endpoint: h:2}\n"),
              "duplicate peer \"x\"");
}

}  // namespace
}  // namespace fedgate::gateway

namespace fedgate::gateway {
namespace {

TEST(ConfigSlurm, ASiteOnSlurmNamesNoNodes) {
  testing::TempDir dir;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) testing::WriteText(dir / f, "x");
  const std::string head =
      "site: cn-shanghai\nfederation: aidc\nlisten: {grpc: 0.0.0.0:7443}\n"
      "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\n";
  auto c = ParseConfig(head + "inventory: {source: slurm}\nexecutor: {kind: slurm}\n"
                              "slurm: {partition: gpu, conf: /etc/slurm/slurm.conf, "
                              "gpu_models: {a100: A100-80GB}, accounts: {team-a: acct-a}}\n",
                       dir.path(), "fedgate.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->nodes.empty());
  EXPECT_EQ(c->executor.kind, "slurm");
  EXPECT_EQ(c->slurm.partition, "gpu");
  EXPECT_EQ(c->slurm.conf, "/etc/slurm/slurm.conf");
  EXPECT_EQ(c->slurm.gpu_models.at("a100"), "A100-80GB");
  EXPECT_EQ(c->slurm.accounts.at("team-a"), "acct-a");
  auto with_nodes = ParseConfig(head + "inventory: {source: slurm, nodes: []}\nexecutor: {kind: slurm}\n"
                                       "slurm: {partition: gpu}\n",
                                dir.path(), "fedgate.yaml");
  ASSERT_FALSE(with_nodes.ok());
  EXPECT_NE(with_nodes.status().message().find("not given with source slurm: its API lists the nodes"),
            std::string::npos);
  auto no_block = ParseConfig(head + "inventory: {source: slurm}\nexecutor: {kind: slurm}\n",
                              dir.path(), "fedgate.yaml");
  ASSERT_FALSE(no_block.ok());
  EXPECT_NE(no_block.status().message().find("\"slurm\""), std::string::npos);
}

TEST(ConfigKubernetes, ASiteOnKubernetesReadsItsSectionAndNamesWhatIsWrong) {
  testing::TempDir dir;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) testing::WriteText(dir / f, "x");
  const std::string head =
      "site: cn-shanghai\nfederation: aidc\nlisten: {grpc: 0.0.0.0:7443}\n"
      "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\n"
      "inventory: {source: kubernetes}\nexecutor: {kind: kubernetes}\n";
  auto c = ParseConfig(head + "kubernetes: {kubeconfig: kc.yaml, namespace: gpu-jobs, "
                              "node_selector: {fedgate.io/pool: \"true\"}, image: img:1, "
                              "host_network: true, tenant_namespaces: {team-a: team-vision}}\n",
                       dir.path(), "fedgate.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->nodes.empty());
  EXPECT_EQ(c->kubernetes.kubeconfig, dir / "kc.yaml");  // relative to the config's folder
  EXPECT_EQ(c->kubernetes.namespace_, "gpu-jobs");
  EXPECT_EQ(c->kubernetes.node_selector.at("fedgate.io/pool"), "true");
  EXPECT_EQ(c->kubernetes.gpu_model_label, "nvidia.com/gpu.product");  // the default
  EXPECT_EQ(c->kubernetes.image, "img:1");
  EXPECT_TRUE(c->kubernetes.host_network);
  EXPECT_EQ(c->kubernetes.tenant_namespaces.at("team-a"), "team-vision");
  const auto error = [&](const std::string& text) {
    auto bad = ParseConfig(text, dir.path(), "fedgate.yaml");
    EXPECT_FALSE(bad.ok()) << text;
    return bad.ok() ? std::string() : std::string(bad.status().message());
  };
  EXPECT_NE(error(head).find("\"kubernetes\" (kubeconfig, namespace, node_selector) is needed"),
            std::string::npos);
  EXPECT_NE(error(head + "kubernetes: {namespace: Bad_NS}\n").find("not a valid namespace"), std::string::npos);
  EXPECT_NE(error(head + "kubernetes: {node_selector: {a: \"x y\"}}\n").find("is not a label value"),
            std::string::npos);
  EXPECT_NE(error(head + "kubernetes: {tenant_namespaces: {team-a: \"NS\"}}\n").find("not a valid namespace"),
            std::string::npos);
  EXPECT_NE(error(head + "kubernetes: {kubeconfig: kc, secrets: yes}\n").find("unknown key \"kubernetes.secrets\""),
            std::string::npos);
  EXPECT_NE(error(head + "kubernetes: {host_network: maybe}\n").find("\"kubernetes.host_network\" must be"),
            std::string::npos);
  // The executor and the inventory go together.
  auto half = head;
  half.replace(half.find("executor: {kind: kubernetes}"), 28, "executor: {kind: process}");
  EXPECT_NE(error(half + "kubernetes: {}\n").find("go together"), std::string::npos);
}

}  // namespace
}  // namespace fedgate::gateway
