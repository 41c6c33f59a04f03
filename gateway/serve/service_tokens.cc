#include "gateway/serve/service_tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/str_cat.h"
#include "gateway/store/store.h"

namespace fedgate::gateway {
namespace {

constexpr const char* kPrefix = "service-token/";

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

std::string Sha256Hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

}  // namespace

absl::Status ServiceTokens::LoadLocked() {
  if (loaded_) return absl::OkStatus();
  auto rows = store_->ListKv(kPrefix);
  if (!rows.ok()) return rows.status();
  for (const auto& [key, hash] : *rows) by_hash_[hash] = key.substr(std::string(kPrefix).size());
  loaded_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ServiceTokens::Issue(const std::string& service_id) {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return absl::InternalError("no randomness for a token");
  const std::string token = "fgs_" + Hex(raw, sizeof(raw));
  const std::string hash = Sha256Hex(token);
  // Durable first: a token handed out is one a restarted gateway honours.
  if (auto st = store_->PutKv(StrCat(kPrefix, service_id), hash); !st.ok()) return st;
  std::lock_guard lock(mu_);
  if (auto st = LoadLocked(); !st.ok()) return st;
  for (auto it = by_hash_.begin(); it != by_hash_.end();) {
    it = it->second == service_id ? by_hash_.erase(it) : std::next(it);
  }
  by_hash_[hash] = service_id;
  return token;
}

absl::Status ServiceTokens::Revoke(const std::string& service_id) {
  if (auto st = store_->DeleteKv(StrCat(kPrefix, service_id)); !st.ok()) return st;
  std::lock_guard lock(mu_);
  if (auto st = LoadLocked(); !st.ok()) return st;
  for (auto it = by_hash_.begin(); it != by_hash_.end();) {
    it = it->second == service_id ? by_hash_.erase(it) : std::next(it);
  }
  return absl::OkStatus();
}

std::optional<std::string> ServiceTokens::Lookup(const std::string& token) {
  if (token.size() != 68 || token.rfind("fgs_", 0) != 0) return std::nullopt;
  // Looked up by hash: the map never compares the secret itself.
  const std::string hash = Sha256Hex(token);
  std::lock_guard lock(mu_);
  if (!LoadLocked().ok()) return std::nullopt;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

}  // namespace fedgate::gateway
