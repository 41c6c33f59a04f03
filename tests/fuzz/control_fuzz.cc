// The benchmark control connection (fedbench server, the gateway's bench
// listener): a byte stream of length-prefixed frames, a BenchHello first and
// BenchRounds after, each checked as the server checks it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fedgate/v1/bench.pb.h"
#include "transport/control.h"
#include "transport/engine.h"
#include "tests/fuzz/quiet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  bool first = true;
  while (in.size() >= 4) {
    auto n = fedgate::transport::CheckFrameHeader(reinterpret_cast<const unsigned char*>(in.data()));
    if (!n.ok()) return 0;
    in.remove_prefix(4);
    if (*n > in.size()) return 0;  // the rest never arrives: the read times out
    const std::string_view payload = in.substr(0, *n);
    in.remove_prefix(*n);
    if (first) {
      fedgate::v1::BenchHello hello;
      if (!fedgate::transport::ParseFramePayload(payload, &hello).ok()) return 0;
      first = false;
      continue;
    }
    fedgate::v1::BenchRound round;
    if (!fedgate::transport::ParseFramePayload(payload, &round).ok()) return 0;
    if (round.done()) return 0;
    (void)fedgate::transport::CheckRound(round);
  }
  return 0;
}
