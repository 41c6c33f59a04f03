#include "gateway/security/certs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/str_cat.h"
#include "gateway/security/openssl_ptr.h"
#include "absl/strings/str_join.h"

namespace fedgate::gateway {
namespace {

std::string OpenSslError(std::string_view what) {
  unsigned long e = ERR_get_error();
  char buf[256] = {0};
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  return fedgate::StrCat(what, e != 0 ? ": " : "", buf);
}

std::string BioToString(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(len));
}

KeyPtr ReadKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return KeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

CertPtr ReadCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return CertPtr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

}  // namespace

absl::StatusOr<KeyAndCert> MakeCertificate(const CertSpec& spec, const KeyAndCert* issuer) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return absl::InternalError(OpenSslError("EC P-256 key generation failed"));
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);

  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) {
    return absl::InternalError(OpenSslError("no randomness for the serial number"));
  }
  serial_bytes[0] &= 0x7f;  // positive
  std::unique_ptr<BIGNUM, OpenSslDeleter<BIGNUM, BN_free>> bn(
      BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr));
  BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()));

  X509_gmtime_adj(X509_getm_notBefore(cert.get()), spec.not_before_offset_seconds);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  spec.not_before_offset_seconds + spec.valid_seconds);

  X509_NAME* name = X509_get_subject_name(cert.get());
  if (!spec.organization.empty()) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(spec.organization.c_str()),
                               -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1,
                             -1, 0);
  X509_set_pubkey(cert.get(), key.get());

  CertPtr issuer_cert;
  KeyPtr issuer_key;
  if (issuer != nullptr) {
    issuer_cert = ReadCert(issuer->cert_pem);
    issuer_key = ReadKey(issuer->key_pem);
    if (!issuer_cert || !issuer_key) return absl::InvalidArgumentError("unreadable issuer CA");
    X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer_cert.get()));
  } else {
    X509_set_issuer_name(cert.get(), name);
  }
  X509* issuer_x = issuer_cert ? issuer_cert.get() : cert.get();

  bool ok = AddExt(cert.get(), issuer_x, NID_subject_key_identifier, "hash");
  ok = ok && AddExt(cert.get(), issuer_x, NID_authority_key_identifier, "keyid:always");
  if (spec.is_ca) {
    ok = ok && AddExt(cert.get(), issuer_x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    ok = ok && AddExt(cert.get(), issuer_x, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    ok = ok && AddExt(cert.get(), issuer_x, NID_basic_constraints, "critical,CA:FALSE");
    ok = ok && AddExt(cert.get(), issuer_x, NID_key_usage, "critical,digitalSignature");
    ok = ok && AddExt(cert.get(), issuer_x, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  std::vector<std::string> sans;
  for (const auto& u : spec.uris) sans.push_back("URI:" + u);
  for (const auto& d : spec.dns) sans.push_back("DNS:" + d);
  for (const auto& i : spec.ips) sans.push_back("IP:" + i);
  if (!sans.empty()) {
    ok = ok && AddExt(cert.get(), issuer_x, NID_subject_alt_name, absl::StrJoin(sans, ","));
  }
  if (!ok) return absl::InvalidArgumentError(OpenSslError("bad certificate extension"));

  EVP_PKEY* sign_key = issuer_key ? issuer_key.get() : key.get();
  if (X509_sign(cert.get(), sign_key, EVP_sha256()) == 0) {
    return absl::InternalError(OpenSslError("signing failed"));
  }

  BioPtr kb(BIO_new(BIO_s_mem()));
  BioPtr cb(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(kb.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  PEM_write_bio_X509(cb.get(), cert.get());
  return KeyAndCert{BioToString(kb.get()), BioToString(cb.get())};
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& content, int mode) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(fedgate::StrCat("cannot write ", tmp, ": ", strerror(errno)));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n <= 0) {
      ::close(fd);
      return absl::InternalError(fedgate::StrCat("write to ", tmp, " failed: ", strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
  ::fchmod(fd, mode);
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(fedgate::StrCat("rename to ", path, " failed: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(fedgate::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::Status InitCa(const std::string& dir, const std::string& federation, int valid_days) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(fedgate::StrCat("cannot create ", dir, ": ", ec.message()));
  if (std::filesystem::exists(dir + "/ca-key.pem")) {
    return absl::AlreadyExistsError(
        fedgate::StrCat(dir, "/ca-key.pem already exists; refusing to overwrite a CA"));
  }
  CertSpec spec;
  spec.common_name = fedgate::StrCat("fedgate ", federation, " CA");
  spec.organization = federation;
  spec.uris = {fedgate::StrCat("spiffe://", federation)};
  spec.is_ca = true;
  spec.valid_seconds = static_cast<int64_t>(valid_days) * 24 * 3600;
  auto kc = MakeCertificate(spec, nullptr);
  if (!kc.ok()) return kc.status();
  if (auto st = WriteFileAtomic(dir + "/ca-key.pem", kc->key_pem, 0600); !st.ok()) return st;
  return WriteFileAtomic(dir + "/ca.pem", kc->cert_pem, 0644);
}

absl::StatusOr<std::string> CaFederation(const std::string& ca_dir) {
  auto pem = ReadFile(ca_dir + "/ca.pem");
  if (!pem.ok()) return pem.status();
  CertPtr cert = ReadCert(*pem);
  if (!cert) return absl::InvalidArgumentError(fedgate::StrCat(ca_dir, "/ca.pem is not a PEM cert"));
  char buf[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_organizationName, buf,
                                sizeof(buf)) <= 0) {
    return absl::InvalidArgumentError(
        fedgate::StrCat(ca_dir, "/ca.pem has no organisation (federation) in its subject"));
  }
  return std::string(buf);
}

absl::Status IssueToDir(const std::string& ca_dir, const std::string& out_dir,
                        const std::string& uri, const std::vector<std::string>& dns,
                        const std::vector<std::string>& ips, int valid_days) {
  auto ca_cert = ReadFile(ca_dir + "/ca.pem");
  if (!ca_cert.ok()) return ca_cert.status();
  auto ca_key = ReadFile(ca_dir + "/ca-key.pem");
  if (!ca_key.ok()) return ca_key.status();
  KeyAndCert ca{*ca_key, *ca_cert};
  CertSpec spec;
  spec.common_name = uri;
  spec.uris = {uri};
  spec.dns = dns;
  spec.ips = ips;
  spec.valid_seconds = static_cast<int64_t>(valid_days) * 24 * 3600;
  auto kc = MakeCertificate(spec, &ca);
  if (!kc.ok()) return kc.status();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(fedgate::StrCat("cannot create ", out_dir, ": ", ec.message()));
  if (auto st = WriteFileAtomic(out_dir + "/ca.pem", *ca_cert, 0644); !st.ok()) return st;
  if (auto st = WriteFileAtomic(out_dir + "/key.pem", kc->key_pem, 0600); !st.ok()) return st;
  return WriteFileAtomic(out_dir + "/cert.pem", kc->cert_pem, 0644);
}

absl::StatusOr<int64_t> CertNotAfterUnix(const std::string& pem_path) {
  auto pem = ReadFile(pem_path);
  if (!pem.ok()) return pem.status();
  BIO* bio = BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return absl::InvalidArgumentError(fedgate::StrCat(pem_path, ": no PEM certificate"));
  const ASN1_TIME* not_after = X509_get0_notAfter(cert);
  struct tm tm {};
  const bool ok = ASN1_TIME_to_tm(not_after, &tm) == 1;
  X509_free(cert);
  if (!ok) return absl::InvalidArgumentError(fedgate::StrCat(pem_path, ": unreadable notAfter"));
  return static_cast<int64_t>(timegm(&tm));
}

std::string PeerCertificatePem(ssl_st* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return "";
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(len));
  BIO_free(bio);
  X509_free(cert);
  return pem;
}

}  // namespace fedgate::gateway
