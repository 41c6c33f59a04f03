// Ad verification, fed what any peer can put in AdvertiseRequest.signed_ads:
// the input is a serialized SignedAd. An empty certificate is replaced by a
// genuine gateway certificate of site-b and an empty signature by site-b's
// genuine signature, so mutated ads also get past the signature check and
// into the ad store's own checks, as a relayed ad would. The same input is
// also checked as a takeover grant (SignedGrant; an empty signature replaced
// by site-b's genuine one): accepted only as site-b's own grant. Every ad
// that verifies must fail as a grant (the signatures are domain-separated).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string>

#include "federation/ad_store.h"
#include "federation/clock.h"
#include "gateway/security/ad_signing.h"
#include "gateway/security/certs.h"
#include "tests/fuzz/quiet.h"
#include "tests/fuzz/step_clock.h"

namespace {

using namespace fedgate;

using testing::StepClock;

struct World {
  gateway::KeyAndCert ca, gw;
  std::string gw_der;
  std::unique_ptr<gateway::AdVerifier> verifier;
  StepClock clock;
  std::unique_ptr<federation::AdStore> ads;
};

World* Make() {
  auto* w = new World();
  gateway::CertSpec ca;
  ca.common_name = "aidc CA";
  ca.organization = "aidc";
  ca.is_ca = true;
  auto made = gateway::MakeCertificate(ca, nullptr);
  if (!made.ok()) std::abort();
  w->ca = *made;
  gateway::CertSpec leaf;
  leaf.common_name = "site-b";
  leaf.uris = {"spiffe://aidc/site/site-b/gateway"};
  auto gw = gateway::MakeCertificate(leaf, &w->ca);
  if (!gw.ok()) std::abort();
  w->gw = *gw;
  v1::CapacityAd probe;
  probe.set_origin("site-b");
  auto signed_probe = gateway::SignAd(probe, w->gw.cert_pem, w->gw.key_pem);
  if (!signed_probe.ok()) std::abort();
  w->gw_der = signed_probe->certificate();
  w->verifier = std::make_unique<gateway::AdVerifier>(w->ca.cert_pem, "aidc");
  w->ads = std::make_unique<federation::AdStore>("site-a", &w->clock);
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = Make();
  v1::SignedAd s;
  if (!s.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (s.certificate().empty()) s.set_certificate(w->gw_der);
  if (s.signature().empty()) {
    v1::CapacityAd ad;
    if (ad.ParseFromString(s.ad())) {
      auto genuine = gateway::SignAd(ad, w->gw.cert_pem, w->gw.key_pem);
      if (genuine.ok()) s = *genuine;
    }
  }
  gateway::AdRefusal why;
  auto ad = w->verifier->Verify(s, &why);
  if (ad.ok()) {
    (void)w->ads->Offer(*ad, "site-b", s);
    (void)w->ads->Pending("site-c", {});
    (void)w->ads->ExpireNow();
    // No signed ad passes for a takeover grant: the bytes and the signature
    // of an ad that verified, presented as a grant, are refused.
    v1::SignedGrant as_grant;
    as_grant.set_grant(s.ad());
    as_grant.set_signature(s.signature());
    as_grant.set_certificate(s.certificate());
    gateway::AdRefusal grant_why;
    if (w->verifier->VerifyGrant(as_grant, &grant_why).ok()) std::abort();
  } else if (why.reason.empty()) {
    std::abort();  // every refusal names its reason
  }
  // The same bytes as a grant (any member may send grants with a renewal):
  // refused with a reason, or a grant of the one trusted signer.
  v1::SignedGrant g;
  if (g.ParseFromArray(data, static_cast<int>(size))) {
    if (g.certificate().empty()) g.set_certificate(w->gw_der);
    if (g.signature().empty()) {
      v1::Grant body;
      if (body.ParseFromString(g.grant())) {
        auto genuine = gateway::SignGrant(body, w->gw.cert_pem, w->gw.key_pem);
        if (genuine.ok()) g = *genuine;
      }
    }
    gateway::AdRefusal grant_why;
    auto grant = w->verifier->VerifyGrant(g, &grant_why);
    if (grant.ok() ? grant->granter() != "site-b" : grant_why.reason.empty()) std::abort();
  }
  return 0;
}
