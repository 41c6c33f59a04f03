#include "bench/fedsim/trace.h"

#include <charconv>
#include <cmath>
#include <map>

#include "base/str_cat.h"
#include "base/text.h"

namespace fedgate::fedsim {
namespace {

bool Number(std::string_view s, double* out) {
  s = Trim(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

}  // namespace

absl::StatusOr<std::vector<TraceJob>> ParseTrace(const std::string& text, TraceInfo* info) {
  std::vector<TraceJob> out;
  std::map<std::string, size_t> col;
  int line_no = 0;
  size_t width = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) continue;
    const std::vector<std::string_view> f = Split(line, ',');
    if (col.empty()) {
      for (size_t i = 0; i < f.size(); ++i) col[std::string(Trim(f[i]))] = i;
      for (const char* need : {"time", "duration", "num_gpus"}) {
        if (!col.contains(need)) {
          return absl::InvalidArgumentError(
              StrCat("trace line ", line_no, ": the header has no column \"", need, "\""));
        }
      }
      width = f.size();
      info->has_tenant = col.contains("tenant");
      info->has_model = col.contains("gpu_model");
      info->has_priority = col.contains("priority");
      continue;
    }
    if (f.size() != width) {
      return absl::InvalidArgumentError(
          StrCat("trace line ", line_no, ": ", f.size(), " fields, the header has ", width));
    }
    auto num = [&](const char* name, double* v) -> absl::Status {
      if (!Number(f[col[name]], v)) {
        return absl::InvalidArgumentError(StrCat("trace line ", line_no, ": \"", name,
                                                 "\" is not a number: \"", Trim(f[col[name]]), "\""));
      }
      return absl::OkStatus();
    };
    TraceJob j;
    j.line = line_no;
    double gpus = 0;
    if (auto st = num("time", &j.submit_s); !st.ok()) return st;
    if (auto st = num("duration", &j.duration_s); !st.ok()) return st;
    if (auto st = num("num_gpus", &gpus); !st.ok()) return st;
    if (j.submit_s < 0) return absl::InvalidArgumentError(StrCat("trace line ", line_no, ": negative time"));
    if (j.duration_s < 0) {
      return absl::InvalidArgumentError(StrCat("trace line ", line_no, ": negative duration"));
    }
    if (gpus < 1 || gpus != std::floor(gpus) || gpus > 65536) {
      return absl::InvalidArgumentError(
          StrCat("trace line ", line_no, ": \"num_gpus\" must be a whole number >= 1"));
    }
    j.gpus = static_cast<uint32_t>(gpus);
    if (info->has_tenant) j.tenant = std::string(Trim(f[col["tenant"]]));
    if (info->has_model) j.gpu_model = std::string(Trim(f[col["gpu_model"]]));
    if (info->has_priority) {
      j.priority = std::string(Trim(f[col["priority"]]));
      if (j.priority != "guaranteed" && j.priority != "spot") {
        return absl::InvalidArgumentError(StrCat("trace line ", line_no,
                                                 ": \"priority\" must be guaranteed or spot"));
      }
    }
    out.push_back(std::move(j));
  }
  if (col.empty()) return absl::InvalidArgumentError("trace is empty (no header)");
  return out;
}

}  // namespace fedgate::fedsim
