#include "tests/support/pki.h"

#include <filesystem>
#include <stdexcept>

namespace fedgate::testing {

namespace {
gateway::KeyAndCert Must(absl::StatusOr<gateway::KeyAndCert> kc) {
  if (!kc.ok()) throw std::runtime_error(std::string(kc.status().message()));
  return *kc;
}
}  // namespace

TestCa::TestCa(std::string federation) : federation_(std::move(federation)) {
  gateway::CertSpec spec;
  spec.common_name = "test CA " + federation_;
  spec.organization = federation_;
  spec.is_ca = true;
  spec.valid_seconds = 10 * 24 * 3600;
  ca_ = Must(gateway::MakeCertificate(spec, nullptr));
}

TlsFiles TestCa::Leaf(const std::vector<std::string>& uris, int64_t not_before_offset_s,
                      int64_t valid_s) const {
  gateway::CertSpec spec;
  spec.common_name = uris.empty() ? "no-uri" : uris[0];
  spec.uris = uris;
  spec.not_before_offset_seconds = not_before_offset_s;
  spec.valid_seconds = valid_s;
  auto kc = Must(gateway::MakeCertificate(spec, &ca_));
  return {ca_.cert_pem, kc.cert_pem, kc.key_pem};
}

TlsFiles TestCa::Gateway(const std::string& site) const {
  // With loopback SANs so HTTPS clients (curl) can verify it by address.
  gateway::CertSpec spec;
  spec.common_name = site;
  spec.uris = {"spiffe://" + federation_ + "/site/" + site + "/gateway"};
  spec.dns = {"localhost"};
  spec.ips = {"127.0.0.1"};
  auto kc = Must(gateway::MakeCertificate(spec, &ca_));
  return {ca_.cert_pem, kc.cert_pem, kc.key_pem};
}

TlsFiles TestCa::Admin(const std::string& site, const std::string& name) const {
  return Leaf({"spiffe://" + federation_ + "/site/" + site + "/admin/" + name});
}

TlsFiles TestCa::User(const std::string& tenant, const std::string& name) const {
  return Leaf({"spiffe://" + federation_ + "/tenant/" + tenant + "/user/" + name});
}

TlsFiles SelfSigned(const std::string& uri, const std::string& trusted_ca_pem) {
  gateway::CertSpec spec;
  spec.common_name = uri;
  spec.uris = {uri};
  auto kc = Must(gateway::MakeCertificate(spec, nullptr));
  return {trusted_ca_pem, kc.cert_pem, kc.key_pem};
}

void WriteTlsDir(const std::string& dir, const TlsFiles& files) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, content, mode] :
       {std::tuple<const char*, const std::string&, int>{"ca.pem", files.ca_pem, 0644},
        {"cert.pem", files.cert_pem, 0644},
        {"key.pem", files.key_pem, 0600}}) {
    auto st = gateway::WriteFileAtomic(dir + "/" + name, content, mode);
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  }
}

}  // namespace fedgate::testing
