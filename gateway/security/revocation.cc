#include "gateway/security/revocation.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>
#include <vector>

#include "base/str_cat.h"
#include "gateway/security/certs.h"

namespace fedgate::gateway {
namespace {

struct CrlFree {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};
using CrlPtr = std::unique_ptr<X509_CRL, CrlFree>;

std::vector<CrlPtr> ParseCrls(std::string_view pem) {
  std::vector<CrlPtr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr)) {
    out.emplace_back(crl);
  }
  BIO_free(bio);
  ERR_clear_error();  // the end of the file reads as an error
  return out;
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string FileStamp(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  return StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

struct RevocationList::Crls {
  std::vector<CrlPtr> list;
};

RevocationList::RevocationList(std::string path)
    : path_(std::move(path)), crls_(std::make_unique<Crls>()) {
  std::lock_guard lock(mu_);
  ReloadLocked();
}

RevocationList::~RevocationList() = default;

void RevocationList::ReloadLocked() {
  if (path_.empty()) return;
  const int64_t now = SteadyMs();
  if (checked_at_ms_ >= 0 && now - checked_at_ms_ < 1000) return;
  checked_at_ms_ = now;
  std::string stamp = FileStamp(path_);
  if (stamp == stamp_) return;
  auto text = ReadFile(path_);
  if (!text.ok()) {
    // Keep what was loaded: a CRL being replaced must not un-revoke anyone.
    error_ = StrCat("tls.crl: ", text.status().message());
    spdlog::error("{}", error_);
    return;
  }
  auto crls = ParseCrls(*text);
  if (crls.empty()) {
    error_ = StrCat("tls.crl: ", path_, " holds no PEM CRL");
    spdlog::error("{}", error_);
    return;
  }
  stamp_ = std::move(stamp);
  error_.clear();
  crls_->list = std::move(crls);
  answers_.clear();
  spdlog::info("tls.crl: loaded {} CRL(s) from {}", crls_->list.size(), path_);
}

std::string RevocationList::error() {
  std::lock_guard lock(mu_);
  ReloadLocked();
  return error_;
}

absl::Status RevocationList::Check(std::string_view cert_pem) {
  if (path_.empty()) return absl::OkStatus();
  {
    // Every call of a long-lived connection asks again: remember answers
    // until the CRL changes.
    std::lock_guard lock(mu_);
    ReloadLocked();
    auto it = answers_.find(std::string(cert_pem));
    if (it != answers_.end()) return it->second;
  }
  absl::Status st = CheckUncached(cert_pem);
  std::lock_guard lock(mu_);
  if (answers_.size() >= 1024) answers_.clear();
  answers_.emplace(std::string(cert_pem), st);
  return st;
}

absl::Status RevocationList::CheckUncached(std::string_view cert_pem) {
  BIO* bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::UnauthenticatedError("certificate is not valid PEM");
  }
  absl::Status st = absl::OkStatus();
  {
    std::lock_guard lock(mu_);
    ReloadLocked();
    for (const auto& crl : crls_->list) {
      if (X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_issuer_name(cert)) != 0) continue;
      X509_REVOKED* revoked = nullptr;
      if (X509_CRL_get0_by_cert(crl.get(), &revoked, cert) == 1) {
        BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
        char* hex = bn != nullptr ? BN_bn2hex(bn) : nullptr;
        st = absl::UnauthenticatedError(
            StrCat("certificate with serial ", hex != nullptr ? hex : "?", " is revoked (tls.crl)"));
        OPENSSL_free(hex);
        BN_free(bn);
        break;
      }
    }
  }
  X509_free(cert);
  return st;
}

absl::Status AddCrlsToStore(X509_STORE* store, std::string_view crl_pem) {
  auto crls = ParseCrls(crl_pem);
  if (crls.empty()) return absl::InvalidArgumentError("no PEM CRL");
  for (const auto& crl : crls) X509_STORE_add_crl(store, crl.get());
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  return absl::OkStatus();
}

}  // namespace fedgate::gateway
