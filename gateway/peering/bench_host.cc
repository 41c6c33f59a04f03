#include "gateway/peering/bench_host.h"

#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "base/str_cat.h"

namespace fedgate::gateway {

std::string RandomToken() {
  unsigned char bytes[16];
  RAND_bytes(bytes, sizeof(bytes));
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

BenchHost::~BenchHost() {
  std::lock_guard lock(mu_);
  for (auto& s : servers_) s->Stop();
}

absl::StatusOr<v1::OpenBenchResponse> BenchHost::Open(const std::string& for_site,
                                                      const v1::OpenBenchRequest& req) {
  if (req.transport() != "tcp") {
    return absl::InvalidArgumentError(
        StrCat("transport \"", req.transport(), "\" is not offered for probes (tcp is)"));
  }
  if (req.streams() == 0 || req.streams() > 16) {
    return absl::InvalidArgumentError(StrCat("streams must be 1..16, got ", req.streams()));
  }
  std::lock_guard lock(mu_);
  std::erase_if(servers_, [](const auto& s) {
    if (!s->done()) return false;
    s->Stop();
    return true;
  });
  if (servers_.size() >= kMaxOpen) {
    return absl::ResourceExhaustedError("too many bench listeners open; try again shortly");
  }
  transport::ServeOptions so;
  so.token = RandomToken();
  so.max_sessions = 1;
  so.idle_timeout_ms = kIdleTimeoutMs;
  so.log = [for_site](const std::string& line) { spdlog::info("bench for {}: {}", for_site, line); };
  auto server = transport::BenchServer::Listen("[::]:0", so);
  if (!server.ok()) return server.status();
  v1::OpenBenchResponse resp;
  resp.set_port(static_cast<uint32_t>((*server)->port()));
  resp.set_token(so.token);
  resp.set_expires_in_seconds(kIdleTimeoutMs / 1000);
  (*server)->ServeInBackground();
  servers_.push_back(std::move(*server));
  return resp;
}

}  // namespace fedgate::gateway
