// tls.crl: certificates the federation CA revoked, from a PEM file of one or
// more CRLs that is re-read when it changes, as the certificates are.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"

typedef struct x509_store_st X509_STORE;

namespace fedgate::gateway {

class RevocationList {
 public:
  // "" revokes nothing.
  explicit RevocationList(std::string path);
  ~RevocationList();

  // OK, or UNAUTHENTICATED naming the revoked certificate (PEM)'s serial.
  absl::Status Check(std::string_view cert_pem);
  // The file could not be read or holds no CRL: why (empty when fine).
  std::string error();
  const std::string& path() const { return path_; }

 private:
  void ReloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckUncached(std::string_view cert_pem);
  struct Crls;

  const std::string path_;
  std::mutex mu_;
  int64_t checked_at_ms_ ABSL_GUARDED_BY(mu_) = -1;
  std::string stamp_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Crls> crls_ ABSL_GUARDED_BY(mu_);
  // By certificate PEM.
  std::unordered_map<std::string, absl::Status> answers_ ABSL_GUARDED_BY(mu_);
};

// Adds every CRL of `crl_pem` to `store` and has it check leaves against
// them. An error when the text holds no CRL.
absl::Status AddCrlsToStore(X509_STORE* store, std::string_view crl_pem);

// Size and mtime of a file, to tell whether it changed ("" if missing).
std::string FileStamp(const std::string& path);

}  // namespace fedgate::gateway
