#include "gateway/kube/kube_json.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <cmath>

#include "base/number.h"
#include "base/str_cat.h"

namespace fedgate::gateway::kube {

absl::StatusOr<Json> ParseJson(std::string_view text) {
  Json v;
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &v);
  if (!st.ok()) return absl::InvalidArgumentError(StrCat("not JSON: ", st.message().ToString()));
  return v;
}

std::string ToJson(const Json& v) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

Json Str(std::string s) {
  Json v;
  v.set_string_value(std::move(s));
  return v;
}
Json Num(double n) {
  Json v;
  v.set_number_value(n);
  return v;
}
Json Bool(bool b) {
  Json v;
  v.set_bool_value(b);
  return v;
}
Json Obj() {
  Json v;
  v.mutable_struct_value();
  return v;
}
Json List() {
  Json v;
  v.mutable_list_value();
  return v;
}

const Json* Find(const Json& v, std::initializer_list<std::string_view> path) {
  const Json* at = &v;
  for (auto key : path) {
    if (!at->has_struct_value()) return nullptr;
    const auto& f = at->struct_value().fields();
    auto it = f.find(std::string(key));
    if (it == f.end()) return nullptr;
    at = &it->second;
  }
  return at;
}

std::string FindString(const Json& v, std::initializer_list<std::string_view> path) {
  const Json* at = Find(v, path);
  return at && at->kind_case() == Json::kStringValue ? at->string_value() : "";
}

std::optional<double> FindNumber(const Json& v, std::initializer_list<std::string_view> path) {
  const Json* at = Find(v, path);
  if (!at || at->kind_case() != Json::kNumberValue) return std::nullopt;
  return at->number_value();
}

Json* Mutable(Json* v, std::initializer_list<std::string_view> path) {
  Json* at = v;
  for (auto key : path) {
    if (!at->has_struct_value()) at->mutable_struct_value();
    at = &(*at->mutable_struct_value()->mutable_fields())[std::string(key)];
  }
  return at;
}

void Erase(Json* v, std::initializer_list<std::string_view> path) {
  if (path.size() == 0) return;
  Json* at = v;
  auto last = path.end() - 1;
  for (auto it = path.begin(); it != last; ++it) {
    if (!at->has_struct_value()) return;
    auto* f = at->mutable_struct_value()->mutable_fields();
    auto found = f->find(std::string(*it));
    if (found == f->end()) return;
    at = &found->second;
  }
  if (at->has_struct_value()) at->mutable_struct_value()->mutable_fields()->erase(std::string(*last));
}

Json* Append(Json* list) {
  if (!list->has_list_value()) list->mutable_list_value();
  return list->mutable_list_value()->add_values();
}

bool Equal(const Json& a, const Json& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

void MergePatch(Json* target, const Json& patch) {
  if (!patch.has_struct_value()) {
    *target = patch;
    return;
  }
  if (!target->has_struct_value()) *target = Obj();
  auto* fields = target->mutable_struct_value()->mutable_fields();
  for (const auto& [key, value] : patch.struct_value().fields()) {
    if (value.kind_case() == Json::kNullValue) {
      fields->erase(key);
    } else {
      MergePatch(&(*fields)[key], value);
    }
  }
}

std::optional<int64_t> QuantityCount(const Json* q) {
  if (!q) return std::nullopt;
  if (q->kind_case() == Json::kNumberValue) {
    const double n = q->number_value();
    if (n < 0 || n != std::floor(n) || n > 1e12) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (q->kind_case() != Json::kStringValue) return std::nullopt;
  auto n = ParseNumber<uint64_t>(q->string_value());
  if (!n || *n > 1000000000000ULL) return std::nullopt;
  return static_cast<int64_t>(*n);
}

}  // namespace fedgate::gateway::kube
