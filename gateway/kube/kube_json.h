// Kubernetes objects as JSON values. Protobuf's google.protobuf.Value is
// already in the stack and parses any JSON document, so objects are kept in
// it and read with the small path helpers below (no JSON library added).
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedgate::gateway::kube {

using Json = google::protobuf::Value;

absl::StatusOr<Json> ParseJson(std::string_view text);
std::string ToJson(const Json& v);

Json Str(std::string s);
Json Num(double n);
Json Bool(bool b);
Json Obj();
Json List();

// The value at `path` (object keys), or nullptr where any step is missing
// or is not an object.
const Json* Find(const Json& v, std::initializer_list<std::string_view> path);
std::string FindString(const Json& v, std::initializer_list<std::string_view> path);
std::optional<double> FindNumber(const Json& v, std::initializer_list<std::string_view> path);
// The value at `path`, made (as objects) where missing.
Json* Mutable(Json* v, std::initializer_list<std::string_view> path);
void Erase(Json* v, std::initializer_list<std::string_view> path);
// Appends to the list at v (made a list if it is not one).
Json* Append(Json* list);

// Same content (map order aside: serialised text is not comparable).
bool Equal(const Json& a, const Json& b);

// RFC 7386 JSON merge patch (application/merge-patch+json): null deletes.
void MergePatch(Json* target, const Json& patch);

// A Kubernetes quantity as a whole count ("4", "2k" never occurs for GPUs);
// nullopt when it is not a non-negative integer.
std::optional<int64_t> QuantityCount(const Json* q);

}  // namespace fedgate::gateway::kube
