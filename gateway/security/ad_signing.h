// Ads signed by their origin: the origin signs the exact bytes of its
// CapacityAd with its gateway key; every receiver, at every hop, checks the
// signature, the certificate's chain to the federation CA and that the
// certificate's SPIFFE site is the ad's origin. Relays forward the bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "fedgate/v1/federation.pb.h"
#include "gateway/security/openssl_ptr.h"

namespace fedgate::gateway {

// Signs `ad` with a PEM key; `cert_pem` is the signer's leaf, carried as DER.
absl::StatusOr<v1::SignedAd> SignAd(const v1::CapacityAd& ad, std::string_view cert_pem,
                                    std::string_view key_pem);

// Signs `grant` the same way (see SignedGrant in federation.proto).
absl::StatusOr<v1::SignedGrant> SignGrant(const v1::Grant& grant, std::string_view cert_pem,
                                          std::string_view key_pem);

// Why a signed ad was refused: the label of fedgate_ads_refused_total.
struct AdRefusal {
  std::string reason;  // bad_ad, bad_certificate, untrusted_certificate, revoked,
                       // not_a_gateway, origin_mismatch, bad_signature
  std::string detail;
};

class AdVerifier {
 public:
  // `ca_pem`: the federation's trust bundle; `federation`: its trust domain.
  AdVerifier(const std::string& ca_pem, std::string federation);
  ~AdVerifier();

  // The ad, when every check passes; otherwise why not.
  absl::StatusOr<v1::CapacityAd> Verify(const v1::SignedAd& signed_ad, AdRefusal* why);
  // The grant, when its certificate passes the same checks, names the
  // grant's granter, and signed it.
  absl::StatusOr<v1::Grant> VerifyGrant(const v1::SignedGrant& signed_grant, AdRefusal* why);

  // A new trust bundle (certificate rotation) and, if not empty, the CRLs
  // its leaves are checked against; forgets verified certificates.
  void SetCa(const std::string& ca_pem, const std::string& crl_pem = "");

 private:
  struct Trusted {
    std::string site;
    int64_t not_after_unix = 0;
    KeyPtr key;  // decoded once: a relayed ad then costs the signature check alone
  };
  // The verified certificate's entry (valid while mu_ is held).
  absl::StatusOr<const Trusted*> CheckCertificate(const std::string& der, AdRefusal* why);

  std::mutex mu_;
  std::string federation_;
  struct Store;
  std::unique_ptr<Store> store_;
  // Certificates whose chain was verified, so that a relayed ad costs one
  // signature check, not a chain walk. Bounded: cleared when full.
  std::map<std::string, Trusted> trusted_ ABSL_GUARDED_BY(mu_);
};

// Signs this site's ads and grants and verifies everyone else's.
class AdAuthority {
 public:
  virtual ~AdAuthority() = default;
  virtual absl::StatusOr<v1::SignedAd> Sign(const v1::CapacityAd& ad) = 0;
  virtual absl::StatusOr<v1::CapacityAd> Verify(const v1::SignedAd& signed_ad, AdRefusal* why) = 0;
  virtual absl::StatusOr<v1::SignedGrant> SignGrant(const v1::Grant& grant) = 0;
  virtual absl::StatusOr<v1::Grant> VerifyGrant(const v1::SignedGrant& signed_grant,
                                                AdRefusal* why) = 0;
};

// From the gateway's TLS files, re-read when they change (certificate
// rotation), looked at no more than once a second.
class FileAdAuthority : public AdAuthority {
 public:
  // With `crl_path`, ads signed by a revoked certificate are refused.
  FileAdAuthority(std::string ca_path, std::string cert_path, std::string key_path,
                  std::string federation, std::string crl_path = "");
  absl::StatusOr<v1::SignedAd> Sign(const v1::CapacityAd& ad) override;
  absl::StatusOr<v1::CapacityAd> Verify(const v1::SignedAd& signed_ad, AdRefusal* why) override;
  absl::StatusOr<v1::SignedGrant> SignGrant(const v1::Grant& grant) override;
  absl::StatusOr<v1::Grant> VerifyGrant(const v1::SignedGrant& signed_grant,
                                        AdRefusal* why) override;

 private:
  void ReloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string ca_path_, cert_path_, key_path_, crl_path_;
  std::mutex mu_;
  int64_t checked_at_ms_ ABSL_GUARDED_BY(mu_) = -1;
  std::string stamp_ ABSL_GUARDED_BY(mu_);  // sizes and mtimes of the three files
  std::shared_ptr<EVP_PKEY> signing_key_ ABSL_GUARDED_BY(mu_);
  std::string cert_der_ ABSL_GUARDED_BY(mu_);
  AdVerifier verifier_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedgate::gateway
