#include "gateway/security/ad_signing.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>

#include "base/str_cat.h"
#include "gateway/security/openssl_ptr.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"
#include "gateway/security/revocation.h"

namespace fedgate::gateway {
namespace {

constexpr size_t kMaxAdBytes = 4 << 20;
constexpr size_t kMaxCertBytes = 16 << 10;
constexpr size_t kMaxTrusted = 1024;

// Ed25519 and Ed448 sign the message itself; every other key a SHA-256 digest.
const EVP_MD* DigestFor(EVP_PKEY* key) {
  const int id = EVP_PKEY_get_id(key);
  return id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? nullptr : EVP_sha256();
}

CertPtr CertFromDer(const std::string& der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  CertPtr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  // Trailing bytes would let two encodings name one certificate.
  if (cert && p != reinterpret_cast<const unsigned char*>(der.data()) + der.size()) return nullptr;
  return cert;
}

int64_t NotAfterUnix(X509* cert) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

namespace {

struct SigningKey {
  KeyPtr key;
  std::string cert_der;
};

absl::StatusOr<SigningKey> LoadSigningKey(std::string_view cert_pem, std::string_view key_pem) {
  BioPtr kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!key) return absl::InvalidArgumentError("the gateway key is not a valid PEM private key");
  BioPtr cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  CertPtr cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError("the gateway certificate is not valid PEM");
  unsigned char* der = nullptr;
  const int der_len = i2d_X509(cert.get(), &der);
  if (der_len <= 0) return absl::InternalError("cannot encode the gateway certificate");
  SigningKey out{std::move(key), std::string(reinterpret_cast<const char*>(der), der_len)};
  OPENSSL_free(der);
  return out;
}

absl::StatusOr<std::string> SignBytes(const std::string& msg_bytes, EVP_PKEY* key) {
  MdCtxPtr md(EVP_MD_CTX_new());
  size_t sig_len = 0;
  const auto* msg = reinterpret_cast<const unsigned char*>(msg_bytes.data());
  if (EVP_DigestSignInit(md.get(), nullptr, DigestFor(key), nullptr, key) != 1 ||
      EVP_DigestSign(md.get(), nullptr, &sig_len, msg, msg_bytes.size()) != 1) {
    return absl::InternalError("cannot sign with the gateway key");
  }
  std::string sig(sig_len, '\0');
  if (EVP_DigestSign(md.get(), reinterpret_cast<unsigned char*>(sig.data()), &sig_len, msg,
                     msg_bytes.size()) != 1) {
    return absl::InternalError("cannot sign with the gateway key");
  }
  sig.resize(sig_len);
  return sig;
}

bool VerifyBytes(EVP_PKEY* key, const std::string& msg, const std::string& sig) {
  MdCtxPtr md(EVP_MD_CTX_new());
  const bool ok =
      EVP_DigestVerifyInit(md.get(), nullptr, DigestFor(key), nullptr, key) == 1 &&
      EVP_DigestVerify(md.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(msg.data()), msg.size()) == 1;
  ERR_clear_error();
  return ok;
}

// A grant's signed message: a prefix no serialized CapacityAd can start with
// ('f' is field 12 of wire type 6, which does not exist), then the grant.
std::string GrantMessage(const std::string& grant_bytes) {
  return std::string("fedgate-grant-v1\0", 17) + grant_bytes;
}

absl::StatusOr<v1::SignedAd> SignWith(const v1::CapacityAd& ad, EVP_PKEY* key,
                                      const std::string& cert_der) {
  v1::SignedAd out;
  if (!ad.SerializeToString(out.mutable_ad())) return absl::InternalError("cannot encode the ad");
  out.set_certificate(cert_der);
  auto sig = SignBytes(out.ad(), key);
  if (!sig.ok()) return sig.status();
  out.set_signature(*std::move(sig));
  return out;
}

absl::StatusOr<v1::SignedGrant> SignGrantWith(const v1::Grant& grant, EVP_PKEY* key,
                                              const std::string& cert_der) {
  v1::SignedGrant out;
  if (!grant.SerializeToString(out.mutable_grant())) {
    return absl::InternalError("cannot encode the grant");
  }
  out.set_certificate(cert_der);
  auto sig = SignBytes(GrantMessage(out.grant()), key);
  if (!sig.ok()) return sig.status();
  out.set_signature(*std::move(sig));
  return out;
}

}  // namespace

absl::StatusOr<v1::SignedAd> SignAd(const v1::CapacityAd& ad, std::string_view cert_pem,
                                    std::string_view key_pem) {
  auto k = LoadSigningKey(cert_pem, key_pem);
  if (!k.ok()) return k.status();
  return SignWith(ad, k->key.get(), k->cert_der);
}

absl::StatusOr<v1::SignedGrant> SignGrant(const v1::Grant& grant, std::string_view cert_pem,
                                          std::string_view key_pem) {
  auto k = LoadSigningKey(cert_pem, key_pem);
  if (!k.ok()) return k.status();
  return SignGrantWith(grant, k->key.get(), k->cert_der);
}

struct AdVerifier::Store {
  X509_STORE* store = nullptr;
  ~Store() { X509_STORE_free(store); }
};

AdVerifier::AdVerifier(const std::string& ca_pem, std::string federation)
    : federation_(std::move(federation)) {
  SetCa(ca_pem);
}

AdVerifier::~AdVerifier() = default;

void AdVerifier::SetCa(const std::string& ca_pem, const std::string& crl_pem) {
  auto store = std::make_unique<Store>();
  store->store = X509_STORE_new();
  BioPtr bio(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())));
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store->store, ca);
    X509_free(ca);
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  if (!crl_pem.empty() && !AddCrlsToStore(store->store, crl_pem).ok()) {
    spdlog::error("signed ads: the CRL holds no PEM CRL; checking without it");
  }
  std::lock_guard lock(mu_);
  store_ = std::move(store);
  trusted_.clear();
}

absl::StatusOr<const AdVerifier::Trusted*> AdVerifier::CheckCertificate(const std::string& der,
                                                                        AdRefusal* why) {
  const int64_t now = std::time(nullptr);
  if (auto it = trusted_.find(der); it != trusted_.end() && now <= it->second.not_after_unix) {
    return &it->second;
  }
  auto refuse = [&](std::string reason, std::string detail) -> absl::StatusOr<const Trusted*> {
    why->reason = reason;
    why->detail = detail;
    return absl::PermissionDeniedError(StrCat(reason, ": ", detail));
  };
  if (der.size() > kMaxCertBytes) return refuse("bad_certificate", "certificate too large");
  CertPtr cert = CertFromDer(der);
  if (!cert) return refuse("bad_certificate", "the ad's certificate is not valid DER");
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store_->store, cert.get(), nullptr) != 1) {
    return refuse("bad_certificate", "cannot verify the certificate");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return refuse(err == X509_V_ERR_CERT_REVOKED ? "revoked" : "untrusted_certificate",
                  X509_verify_cert_error_string(err));
  }
  auto id = IdentityFromCertDer(der);
  if (!id.ok()) return refuse("bad_certificate", std::string(id.status().message()));
  if (id->role != Role::kGateway || id->federation != federation_) {
    return refuse("not_a_gateway", StrCat(id->ToUri(), " is not a gateway of federation ",
                                          federation_));
  }
  KeyPtr key(X509_get_pubkey(cert.get()));
  if (!key) return refuse("bad_certificate", "the certificate has no usable public key");
  if (trusted_.size() >= kMaxTrusted) trusted_.clear();
  auto& entry = trusted_[der];
  entry = Trusted{id->site, NotAfterUnix(cert.get()), std::move(key)};
  return &entry;
}

namespace {

absl::Status Refuse(AdRefusal* why, std::string reason, std::string detail) {
  why->reason = std::move(reason);
  why->detail = std::move(detail);
  return absl::PermissionDeniedError(StrCat(why->reason, ": ", why->detail));
}

// The checks every signed message (ad or grant) passes once its certificate
// verified: the certificate's site is the one the message claims, and the
// signature over `message` is that certificate's key's. `what` names the
// message in refusals ("ad", "grant"), `claim` its claimed site's role.
absl::Status CheckSigner(const std::string& signer_site, EVP_PKEY* key, const std::string& claimed,
                         const std::string& message, const std::string& signature,
                         std::string_view what, std::string_view claim, AdRefusal* why) {
  if (signer_site != claimed) {
    return Refuse(why, "origin_mismatch",
                  StrCat(what == "ad" ? "an " : "a ", what, " ", claim, " \"",
                         claimed.substr(0, 64), "\" signed by site ", signer_site));
  }
  if (!VerifyBytes(key, message, signature)) {
    return Refuse(why, "bad_signature", StrCat("the ", what, " of ", claimed, " is not signed by its key"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CapacityAd> AdVerifier::Verify(const v1::SignedAd& signed_ad, AdRefusal* why) {
  if (signed_ad.ad().size() > kMaxAdBytes) return Refuse(why, "bad_ad", "ad too large");
  v1::CapacityAd ad;
  if (!ad.ParseFromString(signed_ad.ad())) return Refuse(why, "bad_ad", "the ad does not decode");
  std::lock_guard lock(mu_);
  auto trusted = CheckCertificate(signed_ad.certificate(), why);
  if (!trusted.ok()) return trusted.status();
  if (auto st = CheckSigner((*trusted)->site, (*trusted)->key.get(), ad.origin(), signed_ad.ad(),
                            signed_ad.signature(), "ad", "for origin", why);
      !st.ok()) {
    return st;
  }
  return ad;
}

absl::StatusOr<v1::Grant> AdVerifier::VerifyGrant(const v1::SignedGrant& signed_grant,
                                                  AdRefusal* why) {
  if (signed_grant.grant().size() > 4096) return Refuse(why, "bad_grant", "grant too large");
  v1::Grant grant;
  if (!grant.ParseFromString(signed_grant.grant())) {
    return Refuse(why, "bad_grant", "the grant does not decode");
  }
  std::lock_guard lock(mu_);
  auto trusted = CheckCertificate(signed_grant.certificate(), why);
  if (!trusted.ok()) return trusted.status();
  if (auto st = CheckSigner((*trusted)->site, (*trusted)->key.get(), grant.granter(),
                            GrantMessage(signed_grant.grant()), signed_grant.signature(), "grant",
                            "of", why);
      !st.ok()) {
    return st;
  }
  return grant;
}

FileAdAuthority::FileAdAuthority(std::string ca_path, std::string cert_path, std::string key_path,
                                 std::string federation, std::string crl_path)
    : ca_path_(std::move(ca_path)),
      cert_path_(std::move(cert_path)),
      key_path_(std::move(key_path)),
      crl_path_(std::move(crl_path)),
      verifier_("", std::move(federation)) {
  std::lock_guard lock(mu_);
  ReloadLocked();
}

void FileAdAuthority::ReloadLocked() {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (checked_at_ms_ >= 0 && now - checked_at_ms_ < 1000) return;
  checked_at_ms_ = now;
  std::string stamp;
  for (const auto* path : {&ca_path_, &cert_path_, &key_path_, &crl_path_}) {
    stamp += FileStamp(*path) + ";";
  }
  if (stamp == stamp_) return;
  auto ca = ReadFile(ca_path_);
  auto cert = ReadFile(cert_path_);
  auto key = ReadFile(key_path_);
  absl::StatusOr<std::string> crl = std::string();
  if (!crl_path_.empty()) crl = ReadFile(crl_path_);
  if (!ca.ok() || !cert.ok() || !key.ok() || !crl.ok()) return;  // mid-rotation: try later
  auto loaded = LoadSigningKey(*cert, *key);
  if (!loaded.ok()) {
    spdlog::error("signed ads: {}", std::string(loaded.status().message()));
    return;  // mid-rotation or broken: keep the last good key
  }
  stamp_ = std::move(stamp);
  signing_key_ = std::move(loaded->key);
  cert_der_ = std::move(loaded->cert_der);
  verifier_.SetCa(*ca, *crl);
}

absl::StatusOr<v1::SignedAd> FileAdAuthority::Sign(const v1::CapacityAd& ad) {
  // The key is parsed once per file change, not once per ad (every
  // capacity change issues one).
  std::lock_guard lock(mu_);
  ReloadLocked();
  if (!signing_key_) return absl::FailedPreconditionError("no usable gateway key to sign ads with");
  return SignWith(ad, signing_key_.get(), cert_der_);
}

absl::StatusOr<v1::CapacityAd> FileAdAuthority::Verify(const v1::SignedAd& signed_ad,
                                                       AdRefusal* why) {
  {
    std::lock_guard lock(mu_);
    ReloadLocked();
  }
  return verifier_.Verify(signed_ad, why);
}

absl::StatusOr<v1::SignedGrant> FileAdAuthority::SignGrant(const v1::Grant& grant) {
  std::lock_guard lock(mu_);
  ReloadLocked();
  if (!signing_key_) return absl::FailedPreconditionError("no usable gateway key to sign with");
  return SignGrantWith(grant, signing_key_.get(), cert_der_);
}

absl::StatusOr<v1::Grant> FileAdAuthority::VerifyGrant(const v1::SignedGrant& signed_grant,
                                                       AdRefusal* why) {
  {
    std::lock_guard lock(mu_);
    ReloadLocked();
  }
  return verifier_.VerifyGrant(signed_grant, why);
}

}  // namespace fedgate::gateway
