// The gateway's config file: any text must give a Config or an error naming
// what is wrong, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gateway/config/config.h"
#include "tests/fuzz/quiet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)fedgate::gateway::ParseConfig(text, "/nonexistent-fedgate-fuzz", "fedgate.yaml");
  return 0;
}
