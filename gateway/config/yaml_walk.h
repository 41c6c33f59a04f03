// Walking a parsed YAML document with errors that name the file, the line
// and the key: shared by the config file and job specs. A failure throws
// YamlError inside the walk; the parse function that started the walk
// catches it (and yaml-cpp's own exceptions) and returns a Status, so no
// exception leaves the room.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>

#include "base/str_cat.h"

namespace fedgate::gateway {

struct YamlError {
  std::string message;
};

class YamlWalker {
 public:
  // `source` names the text in errors ("fedgate.yaml"); `quote_keys` puts
  // keys in quotes in messages ("\"tls.ca\" must be a string").
  explicit YamlWalker(std::string source, bool quote_keys = true)
      : source_(std::move(source)), quote_(quote_keys) {}

  [[noreturn]] void Fail(const YAML::Node& at, const std::string& what) const;
  // Checks that `map` is a mapping whose keys are all in `allowed`.
  void ExpectKeys(const YAML::Node& map, const std::string& path,
                  const std::set<std::string>& allowed) const;
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : StrCat(path, ".", key);
  }
  std::string Str(const YAML::Node& n, const std::string& key) const;
  template <typename T>
  T Scalar(const YAML::Node& n, const std::string& key, const char* kind) const {
    if (!n.IsScalar()) Fail(n, StrCat(Key(key), " must be ", kind));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      Fail(n, StrCat(Key(key), " must be ", kind, ", got \"", n.Scalar(), "\""));
    }
  }
  // A duration ("30s", "5m") > 0, in milliseconds.
  int64_t Duration(const YAML::Node& n, const std::string& key) const;
  // host:port; port 0 only where `allow_zero`.
  std::string Endpoint(const YAML::Node& n, const std::string& key, bool allow_zero) const;

 private:
  std::string Key(const std::string& key) const { return quote_ ? StrCat("\"", key, "\"") : key; }
  std::string source_;
  bool quote_;
};

}  // namespace fedgate::gateway
