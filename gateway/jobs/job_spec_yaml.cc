#include "gateway/jobs/job_spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "base/str_cat.h"
#include "gateway/config/yaml_walk.h"

namespace fedgate::gateway {
namespace {

uint32_t Count(const YamlWalker& w, const YAML::Node& n, const std::string& key) {
  const int64_t v = w.Scalar<int64_t>(n, key, "a whole number");
  if (v < 0 || v > 0xffffffffLL) w.Fail(n, StrCat(key, " must be >= 0, got ", v));
  return static_cast<uint32_t>(v);
}

void List(const YamlWalker& w, const YAML::Node& n, const std::string& key,
          google::protobuf::RepeatedPtrField<std::string>* out) {
  if (n.IsScalar()) {  // a single value is accepted as a one-item list
    *out->Add() = n.as<std::string>();
    return;
  }
  if (!n.IsSequence()) w.Fail(n, StrCat(key, " must be a list"));
  for (const auto& item : n) *out->Add() = w.Scalar<std::string>(item, key, "a list of strings");
}

// replicas: {min, max}, readiness: {path, period, timeout, failure_threshold},
// autoscale: {target_rps_per_replica, scale_up_after, ...}.
void ParseServiceSection(const YamlWalker& w, const std::string& key, const YAML::Node& v,
                         v1::JobSpec* spec) {
  if (!v.IsMap()) w.Fail(v, StrCat(key, " must be a mapping"));
  for (auto e = v.begin(); e != v.end(); ++e) {
    const std::string k = e->first.as<std::string>();
    const std::string full = StrCat(key, ".", k);
    const YAML::Node x = e->second;
    auto text = [&] { return w.Scalar<std::string>(x, full, "a string"); };
    if (key == "replicas" && k == "min") {
      spec->mutable_replicas()->set_min(Count(w, x, full));
    } else if (key == "replicas" && k == "max") {
      spec->mutable_replicas()->set_max(Count(w, x, full));
    } else if (key == "readiness" && k == "path") {
      spec->mutable_readiness()->set_path(text());
    } else if (key == "readiness" && k == "period") {
      spec->mutable_readiness()->set_period(text());
    } else if (key == "readiness" && k == "timeout") {
      spec->mutable_readiness()->set_timeout(text());
    } else if (key == "readiness" && k == "failure_threshold") {
      spec->mutable_readiness()->set_failure_threshold(Count(w, x, full));
    } else if (key == "autoscale" && k == "target_rps_per_replica") {
      spec->mutable_autoscale()->set_target_rps_per_replica(w.Scalar<double>(x, full, "a number"));
    } else if (key == "autoscale" && k == "scale_up_after") {
      spec->mutable_autoscale()->set_scale_up_after(text());
    } else if (key == "autoscale" && k == "scale_down_after") {
      spec->mutable_autoscale()->set_scale_down_after(text());
    } else if (key == "autoscale" && k == "window") {
      spec->mutable_autoscale()->set_window(text());
    } else if (key == "autoscale" && k == "interval") {
      spec->mutable_autoscale()->set_interval(text());
    } else {
      w.Fail(e->first, StrCat("unknown field \"", full, "\""));
    }
  }
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
  const YamlWalker w(src, /*quote_keys=*/false);
  try {
    if (!root.IsMap()) w.Fail(root, "a job spec must be a mapping of fields");
    static const std::set<std::string> kKeys = {
        "name", "gpus", "gpu_models", "min_gpu_memory_gib", "max_sites", "min_gpus_per_site",
        "min_link_gbps", "allowed_sites", "avoided_sites", "priority", "estimated_duration", "time_limit",
        "max_attempts", "command", "env", "recovery", "max_replacements", "checkpoint",
        "datasets", "preferred_sites", "image", "kind", "replicas", "readiness", "autoscale",
        "spot_replicas", "idempotent", "request_timeout", "max_body", "mig"};
    v1::JobSpec spec;
    const std::map<std::string, google::protobuf::RepeatedPtrField<std::string>*> kLists = {
        {"gpu_models", spec.mutable_gpu_models()},   {"allowed_sites", spec.mutable_allowed_sites()},
        {"avoided_sites", spec.mutable_avoided_sites()},
        {"preferred_sites", spec.mutable_preferred_sites()}, {"datasets", spec.mutable_datasets()}};
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const YAML::Node v = it->second;  // a copy: the iterator yields temporaries
      if (!kKeys.contains(key)) w.Fail(it->first, StrCat("unknown field \"", key, "\""));
      if (auto list = kLists.find(key); list != kLists.end()) {
        List(w, v, key, list->second);
      } else if (key == "name") {
        spec.set_name(w.Scalar<std::string>(v, key, "a string"));
      } else if (key == "image") {
        spec.set_image(w.Scalar<std::string>(v, key, "a string"));
      } else if (key == "mig") {
        spec.set_mig(w.Scalar<std::string>(v, key, "a MIG profile (1g.10gb)"));
      } else if (key == "kind") {
        spec.set_kind(w.Scalar<std::string>(v, key, "job or service"));
      } else if (key == "replicas" || key == "readiness" || key == "autoscale") {
        ParseServiceSection(w, key, v, &spec);
      } else if (key == "spot_replicas") {
        spec.set_spot_replicas(w.Scalar<double>(v, key, "a share between 0 and 1"));
      } else if (key == "idempotent") {
        spec.set_idempotent(w.Scalar<bool>(v, key, "true or false"));
      } else if (key == "request_timeout") {
        spec.set_request_timeout(w.Scalar<std::string>(v, key, "a duration string"));
      } else if (key == "max_body") {
        spec.set_max_body(w.Scalar<std::string>(v, key, "a size (64MiB)"));
      } else if (key == "gpus") {
        spec.set_gpus(Count(w, v, key));
      } else if (key == "min_gpu_memory_gib") {
        spec.set_min_gpu_memory_gib(Count(w, v, key));
      } else if (key == "max_sites") {
        spec.set_max_sites(Count(w, v, key));
        if (spec.max_sites() == 0) w.Fail(v, "max_sites 0: when given it must be >= 1");
      } else if (key == "min_gpus_per_site") {
        spec.set_min_gpus_per_site(Count(w, v, key));
        if (spec.min_gpus_per_site() == 0) w.Fail(v, "min_gpus_per_site must be >= 1");
      } else if (key == "min_link_gbps") {
        spec.set_min_link_gbps(w.Scalar<double>(v, key, "a number"));
      } else if (key == "priority") {
        spec.set_priority(w.Scalar<std::string>(v, key, "a string"));
      } else if (key == "estimated_duration") {
        spec.set_estimated_duration(w.Scalar<std::string>(v, key, "a duration string"));
      } else if (key == "time_limit") {
        spec.set_time_limit(w.Scalar<std::string>(v, key, "a duration string"));
      } else if (key == "max_attempts") {
        spec.set_max_attempts(Count(w, v, key));
        if (spec.max_attempts() == 0) w.Fail(v, "max_attempts must be >= 1");
      } else if (key == "recovery") {
        spec.set_recovery(w.Scalar<std::string>(v, key, "restart or replace"));
      } else if (key == "max_replacements") {
        spec.set_max_replacements(Count(w, v, key));
      } else if (key == "checkpoint") {
        if (!v.IsMap()) w.Fail(v, "checkpoint must be a mapping, e.g. {keep: 2}");
        auto* c = spec.mutable_checkpoint();
        for (auto e = v.begin(); e != v.end(); ++e) {
          const std::string k = e->first.as<std::string>();
          if (k != "keep") w.Fail(e->first, StrCat("unknown field \"checkpoint.", k, "\""));
          c->set_keep(Count(w, e->second, "checkpoint.keep"));
          if (c->keep() == 0) w.Fail(e->second, "checkpoint.keep must be >= 1");
        }
      } else if (key == "command") {
        List(w, v, key, spec.mutable_command());
      } else if (key == "env") {
        if (!v.IsMap()) w.Fail(v, "env must be a mapping");
        for (auto e = v.begin(); e != v.end(); ++e) {
          (*spec.mutable_env())[e->first.as<std::string>()] =
              w.Scalar<std::string>(e->second, "env values", "strings");
        }
      }
    }
    return spec;
  } catch (const YamlError& e) {
    return absl::InvalidArgumentError(e.message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(src, ":", e.mark.line + 1, ": ", e.msg));
  }
}

}  // namespace fedgate::gateway
