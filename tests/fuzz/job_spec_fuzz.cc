// Job specs from tenants (fedctl -f, REST bodies): YAML/JSON text, then the
// semantic checks and defaults that every submit goes through.
#include <cstddef>
#include <cstdint>
#include <string>

#include "federation/job_spec.h"
#include "gateway/jobs/job_spec_yaml.h"
#include "tests/fuzz/quiet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = fedgate::gateway::ParseJobSpec(text, "fuzz.yaml");
  if (!spec.ok()) return 0;
  if (fedgate::federation::ValidateJobSpec(*spec, {"A100-80GB", "H100-80GB"}).ok()) {
    (void)fedgate::federation::WithDefaults(*spec);
  }
  return 0;
}
