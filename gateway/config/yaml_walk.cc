#include "gateway/config/yaml_walk.h"

#include "federation/duration.h"
#include "federation/peer_registry.h"

namespace fedgate::gateway {

void YamlWalker::Fail(const YAML::Node& at, const std::string& what) const {
  std::string where = source_;
  if (at.IsDefined() && at.Mark().line >= 0) where += StrCat(":", at.Mark().line + 1);
  throw YamlError{StrCat(where, ": ", what)};
}

void YamlWalker::ExpectKeys(const YAML::Node& map, const std::string& path,
                            const std::set<std::string>& allowed) const {
  if (!map.IsMap()) Fail(map, StrCat(Key(path), " must be a mapping"));
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (!allowed.contains(key)) Fail(it->first, StrCat("unknown key \"", Join(path, key), "\""));
  }
}

std::string YamlWalker::Str(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) Fail(n, StrCat(Key(key), " must be a string"));
  return n.as<std::string>();
}

int64_t YamlWalker::Duration(const YAML::Node& n, const std::string& key) const {
  auto ms = federation::ParseDurationMs(Str(n, key));
  if (!ms.ok()) Fail(n, StrCat(Key(key), ": ", ms.status().message()));
  if (*ms <= 0) Fail(n, StrCat(Key(key), " must be > 0"));
  return *ms;
}

std::string YamlWalker::Endpoint(const YAML::Node& n, const std::string& key,
                                 bool allow_zero) const {
  std::string v = Str(n, key);
  if (auto st = federation::ValidateEndpoint(v, allow_zero); !st.ok()) {
    Fail(n, StrCat(Key(key), ": ", st.message()));
  }
  return v;
}

}  // namespace fedgate::gateway
