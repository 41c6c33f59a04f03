#include "gateway/jobs/job_spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "base/str_cat.h"

namespace fedgate::gateway {
namespace {

struct SpecError {
  std::string message;
};

[[noreturn]] void Fail(const std::string& source, const YAML::Node& at, const std::string& what) {
  std::string where = source;
  if (at.IsDefined() && at.Mark().line >= 0) where += StrCat(":", at.Mark().line + 1);
  throw SpecError{StrCat(where, ": ", what)};
}

template <typename T>
T Get(const std::string& src, const YAML::Node& n, const std::string& key, const char* kind) {
  if (!n.IsScalar()) Fail(src, n, StrCat(key, " must be ", kind));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    Fail(src, n, StrCat(key, " must be ", kind, ", got \"", n.Scalar(), "\""));
  }
}

uint32_t Count(const std::string& src, const YAML::Node& n, const std::string& key) {
  const int64_t v = Get<int64_t>(src, n, key, "a whole number");
  if (v < 0 || v > 0xffffffffLL) Fail(src, n, StrCat(key, " must be >= 0, got ", v));
  return static_cast<uint32_t>(v);
}

void List(const std::string& src, const YAML::Node& n, const std::string& key,
          google::protobuf::RepeatedPtrField<std::string>* out) {
  if (n.IsScalar()) {  // a single value is accepted as a one-item list
    *out->Add() = n.as<std::string>();
    return;
  }
  if (!n.IsSequence()) Fail(src, n, StrCat(key, " must be a list"));
  for (const auto& item : n) *out->Add() = Get<std::string>(src, item, key, "a list of strings");
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& src) {
  if (text.size() > 1 << 20) return absl::InvalidArgumentError("job spec larger than 1 MiB");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(src, ":", e.mark.line + 1, ": malformed YAML/JSON: ", e.msg));
  }
  try {
    if (!root.IsMap()) Fail(src, root, "a job spec must be a mapping of fields");
    static const std::set<std::string> kKeys = {
        "name", "gpus", "gpu_models", "min_gpu_memory_gib", "max_sites", "min_gpus_per_site",
        "min_link_gbps", "allowed_sites", "avoided_sites", "priority", "estimated_duration", "time_limit",
        "max_attempts", "command", "env"};
    v1::JobSpec spec;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const YAML::Node v = it->second;  // a copy: the iterator yields temporaries
      if (!kKeys.contains(key)) Fail(src, it->first, StrCat("unknown field \"", key, "\""));
      if (key == "name") {
        spec.set_name(Get<std::string>(src, v, key, "a string"));
      } else if (key == "gpus") {
        spec.set_gpus(Count(src, v, key));
      } else if (key == "gpu_models") {
        List(src, v, key, spec.mutable_gpu_models());
      } else if (key == "min_gpu_memory_gib") {
        spec.set_min_gpu_memory_gib(Count(src, v, key));
      } else if (key == "max_sites") {
        spec.set_max_sites(Count(src, v, key));
        if (spec.max_sites() == 0) Fail(src, v, "max_sites 0: when given it must be >= 1");
      } else if (key == "min_gpus_per_site") {
        spec.set_min_gpus_per_site(Count(src, v, key));
        if (spec.min_gpus_per_site() == 0) Fail(src, v, "min_gpus_per_site must be >= 1");
      } else if (key == "min_link_gbps") {
        spec.set_min_link_gbps(Get<double>(src, v, key, "a number"));
      } else if (key == "allowed_sites") {
        List(src, v, key, spec.mutable_allowed_sites());
      } else if (key == "avoided_sites") {
        List(src, v, key, spec.mutable_avoided_sites());
      } else if (key == "priority") {
        spec.set_priority(Get<std::string>(src, v, key, "a string"));
      } else if (key == "estimated_duration") {
        spec.set_estimated_duration(Get<std::string>(src, v, key, "a duration string"));
      } else if (key == "time_limit") {
        spec.set_time_limit(Get<std::string>(src, v, key, "a duration string"));
      } else if (key == "max_attempts") {
        spec.set_max_attempts(Count(src, v, key));
        if (spec.max_attempts() == 0) Fail(src, v, "max_attempts must be >= 1");
      } else if (key == "command") {
        List(src, v, key, spec.mutable_command());
      } else if (key == "env") {
        if (!v.IsMap()) Fail(src, v, "env must be a mapping");
        for (auto e = v.begin(); e != v.end(); ++e) {
          (*spec.mutable_env())[e->first.as<std::string>()] =
              Get<std::string>(src, e->second, "env values", "strings");
        }
      }
    }
    return spec;
  } catch (const SpecError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(src, ":", e.mark.line + 1, ": ", e.msg));
  }
}

}  // namespace fedgate::gateway
