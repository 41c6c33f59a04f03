// datasets: and datasets_cache: of the config file.
#include <yaml-cpp/yaml.h>

#include <set>

#include "base/str_cat.h"
#include "federation/dataset.h"
#include "gateway/config/config_sections.h"

namespace fedgate::gateway::config_sections {
namespace {

bool Inside(const std::string& path, const std::string& dir) {
  return (path + "/").rfind(dir + "/", 0) == 0;
}

}  // namespace

void ParseDatasets(const YAML::Node& root, const std::string& base_dir, const YamlWalker& w,
                   Config& c) {
  if (const auto& list = root["datasets"]; list) {
    if (!list.IsSequence()) w.Fail(list, "\"datasets\" must be a list");
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& d = list[i];
      const std::string at = StrCat("datasets[", i, "]");
      w.ExpectKeys(d, at, {"name", "path", "version"});
      for (const char* req : {"name", "path"}) {
        if (!d[req]) w.Fail(d, StrCat("missing required key \"", at, ".", req, "\""));
      }
      DatasetConfig ds;
      ds.name = w.Str(d["name"], at + ".name");
      if (!federation::IsValidDatasetName(ds.name)) {
        w.Fail(d["name"], StrCat("\"", at, ".name\": \"", ds.name.substr(0, 100),
                                 "\" is not a dataset name (want 1-100 of [A-Za-z0-9._-], "
                                 "starting with a letter or digit)"));
      }
      if (!names.insert(ds.name).second) {
        w.Fail(d["name"], StrCat("\"", at, ".name\": dataset \"", ds.name, "\" is listed twice"));
      }
      ds.path = Resolve(base_dir, w.Str(d["path"], at + ".path"));
      if (Inside(ds.path, c.data_dir) || Inside(c.data_dir, ds.path)) {
        w.Fail(d["path"], StrCat("\"", at, ".path\": ", ds.path,
                                 " overlaps data_dir (ranks read datasets, never data_dir)"));
      }
      if (d["version"]) {
        ds.version = w.Str(d["version"], at + ".version");
        if (!federation::IsValidDatasetName(ds.version)) {
          w.Fail(d["version"], StrCat("\"", at, ".version\": \"", ds.version.substr(0, 100),
                                      "\" is not a version (want [A-Za-z0-9._-])"));
        }
      }
      c.datasets.push_back(std::move(ds));
    }
  }
  if (const auto& cache = root["datasets_cache"]; cache) {
    w.ExpectKeys(cache, "datasets_cache", {"path", "max"});
    if (cache["path"]) c.datasets_cache.path = Resolve(base_dir, w.Str(cache["path"], "datasets_cache.path"));
    if (cache["max"]) {
      const std::string text = w.Str(cache["max"], "datasets_cache.max");
      const auto bytes = federation::ParseByteSize(text);
      if (!bytes || *bytes == 0) {
        w.Fail(cache["max"], StrCat("\"datasets_cache.max\": \"", text.substr(0, 40),
                                    "\" is not a size > 0 (like 500GB, 2TB, 64GiB)"));
      }
      c.datasets_cache.max_bytes = *bytes;
    }
  }
  if (c.datasets_cache.path.empty()) c.datasets_cache.path = c.data_dir + "-datasets";
  if (Inside(c.datasets_cache.path, c.data_dir)) {
    w.Fail(root["datasets_cache"] ? root["datasets_cache"]["path"] : root,
           "\"datasets_cache.path\" must not be inside data_dir (ranks read staged datasets)");
  }
}

}  // namespace fedgate::gateway::config_sections
