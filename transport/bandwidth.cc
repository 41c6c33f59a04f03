#include "transport/bandwidth.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "base/str_cat.h"

namespace fedgate::transport {

double GbitPerSecond(double payload_bytes, double seconds) {
  if (seconds <= 0 || payload_bytes < 0) return 0;
  return payload_bytes * 8.0 / seconds / 1e9;
}

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("invalid size \"", text, "\": ", why, " (examples: 4096, 4K, 64M, 1G)"));
  };
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (value > (uint64_t{1} << 40)) return bad("too large");
    ++i;
  }
  if (i == 0) return bad("no number");
  std::string_view unit = text.substr(i);
  uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "k" || unit == "KiB") {
    scale = 1024;
  } else if (unit == "M" || unit == "MiB") {
    scale = 1024 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024 * 1024 * 1024;
  } else {
    return bad(StrCat("unknown unit \"", unit, "\""));
  }
  if (value == 0) return bad("must be > 0");
  const uint64_t bytes = value * scale;
  if (bytes > (uint64_t{1} << 31)) return bad("larger than 2G");
  return bytes;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizeSweep(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    auto one = ParseSize(text);
    if (!one.ok()) return one.status();
    return std::vector<uint64_t>{*one};
  }
  auto lo = ParseSize(text.substr(0, colon));
  if (!lo.ok()) return lo.status();
  auto hi = ParseSize(text.substr(colon + 1));
  if (!hi.ok()) return hi.status();
  if (*hi < *lo) {
    return absl::InvalidArgumentError(
        StrCat("invalid size sweep \"", text, "\": MAX is smaller than MIN"));
  }
  std::vector<uint64_t> out;
  for (uint64_t s = *lo; s <= *hi; s *= 2) out.push_back(s);
  if (out.back() != *hi) out.push_back(*hi);
  return out;
}

std::string FormatSize(uint64_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return StrCat(bytes >> 30, "G");
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return StrCat(bytes >> 20, "M");
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return StrCat(bytes >> 10, "K");
  return StrCat(bytes);
}

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t idx = static_cast<size_t>(std::clamp(rank, 1.0, double(samples.size()))) - 1;
  return samples[idx];
}

LatencyStats OneWayLatency(const std::vector<double>& round_trip_us) {
  LatencyStats s;
  if (round_trip_us.empty()) return s;
  s.min_us = *std::min_element(round_trip_us.begin(), round_trip_us.end()) / 2;
  s.p50_us = Percentile(round_trip_us, 50) / 2;
  s.p99_us = Percentile(round_trip_us, 99) / 2;
  return s;
}

double TcpPayloadFraction(int mtu) {
  return static_cast<double>(mtu - 52) / static_cast<double>(mtu + 14);
}

}  // namespace fedgate::transport
