// The gateway's config file: any text must give a Config or an error naming
// what is wrong, never a crash.
#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/app/config.h"

// Hostile input is expected: keep protobuf's and the gateway's logs quiet.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)fedgate::gateway::ParseConfig(text, "/nonexistent-fedgate-fuzz", "fedgate.yaml");
  return 0;
}
