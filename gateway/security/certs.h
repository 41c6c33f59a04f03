// Certificate authority and leaf certificates for a federation, written with
// OpenSSL's library (no `openssl` program needed). EC P-256 keys throughout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct ssl_st;

namespace fedgate::gateway {

struct KeyAndCert {
  std::string key_pem;
  std::string cert_pem;
};

struct CertSpec {
  std::string common_name;
  std::string organization;        // the federation for CAs
  std::vector<std::string> uris;   // URI SANs (leaves: exactly one in normal use)
  std::vector<std::string> dns;    // DNS SANs
  std::vector<std::string> ips;    // IP SANs
  bool is_ca = false;
  int64_t not_before_offset_seconds = -300;  // small backdate for clock skew
  int64_t valid_seconds = 397LL * 24 * 3600;
};

// Makes a new key and a certificate for it. With an empty `issuer` the
// certificate is self-signed (a CA root, or a deliberately untrusted leaf).
absl::StatusOr<KeyAndCert> MakeCertificate(const CertSpec& spec, const KeyAndCert* issuer);

// `fedctl certs init-ca`: writes DIR/ca.pem and DIR/ca-key.pem (0600).
absl::Status InitCa(const std::string& dir, const std::string& federation, int valid_days);

// The federation a CA directory was created for (from the CA's subject).
absl::StatusOr<std::string> CaFederation(const std::string& ca_dir);

// `fedctl certs issue`: signs a leaf with the CA in `ca_dir` for `uri` and
// writes OUT/ca.pem, OUT/cert.pem, OUT/key.pem (0600).
absl::Status IssueToDir(const std::string& ca_dir, const std::string& out_dir,
                        const std::string& uri, const std::vector<std::string>& dns,
                        const std::vector<std::string>& ips, int valid_days);

// The notAfter of the first certificate in a PEM file, as Unix seconds.
absl::StatusOr<int64_t> CertNotAfterUnix(const std::string& pem_path);

// The certificate the other end of a TLS connection presented, as PEM; ""
// when it presented none.
std::string PeerCertificatePem(ssl_st* ssl);

// Writes `content` to `path` atomically (temporary file, fsync, rename).
absl::Status WriteFileAtomic(const std::string& path, const std::string& content, int mode);
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace fedgate::gateway
