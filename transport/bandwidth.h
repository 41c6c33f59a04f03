// The bandwidth maths of the benchmark engine: pure functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fedgate::transport {

// Payload Gbit/s: bytes * 8 / seconds / 1e9. Zero for a non-positive window.
double GbitPerSecond(double payload_bytes, double seconds);

// "4096", "4K", "64M", "1G" (binary multiples) to bytes.
absl::StatusOr<uint64_t> ParseSize(std::string_view text);

// "4K:64M" to every power-of-two multiple from 4K up to 64M inclusive
// (4K, 8K, ..., 64M); a single size "1M" to {1M}. MAX must be >= MIN.
absl::StatusOr<std::vector<uint64_t>> ParseSizeSweep(std::string_view text);

// "4K", "1M", "1536" — the shortest exact binary form.
std::string FormatSize(uint64_t bytes);

struct LatencyStats {
  double min_us = 0;
  double p50_us = 0;
  double p99_us = 0;
};

// Nearest-rank percentile (p in [0, 100]) of unsorted samples; 0 if empty.
double Percentile(std::vector<double> samples, double p);

// Half-round-trip latency statistics from round-trip samples in microseconds.
LatencyStats OneWayLatency(const std::vector<double>& round_trip_us);

// The payload fraction of a TCP/IPv4 segment on Ethernet with the given MTU
// and TCP timestamps: (mtu - 52) / (mtu + 14). 1448/1514 for a 1500 MTU.
double TcpPayloadFraction(int mtu);

}  // namespace fedgate::transport
