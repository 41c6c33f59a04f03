// Included once by each fuzz target: hostile input is expected, so
// protobuf's and the gateway's logs stay quiet while libFuzzer runs.
#pragma once

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  return 0;
}
