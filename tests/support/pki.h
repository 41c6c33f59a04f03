// Test certificates built with the project's own certificate code: a CA per
// test, good identities, and deliberately bad ones (expired, self-signed, two
// URI SANs, another CA).
#pragma once

#include <string>
#include <vector>

#include "gateway/security/certs.h"

namespace fedgate::testing {

struct TlsFiles {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

class TestCa {
 public:
  explicit TestCa(std::string federation = "aidc");
  const gateway::KeyAndCert& ca() const { return ca_; }
  const std::string& federation() const { return federation_; }

  // A leaf for one URI (or several, or none) signed by this CA.
  TlsFiles Leaf(const std::vector<std::string>& uris, int64_t not_before_offset_s = -300,
                int64_t valid_s = 24 * 3600) const;
  TlsFiles Gateway(const std::string& site) const;
  TlsFiles Admin(const std::string& site, const std::string& name = "ops") const;
  TlsFiles User(const std::string& tenant, const std::string& name) const;

 private:
  std::string federation_;
  gateway::KeyAndCert ca_;
};

// A leaf signed by its own key, trusted by nobody.
TlsFiles SelfSigned(const std::string& uri, const std::string& trusted_ca_pem);

// Writes ca.pem, cert.pem, key.pem into `dir` (each atomically).
void WriteTlsDir(const std::string& dir, const TlsFiles& files);

}  // namespace fedgate::testing
