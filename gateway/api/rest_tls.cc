#include "gateway/api/rest_tls.h"

#include <openssl/ssl.h>

#include "base/str_cat.h"
#include "base/text.h"
#include "gateway/peering/core.h"
#include "gateway/security/authz.h"
#include "gateway/security/certs.h"
#include "gateway/security/revocation.h"

namespace fedgate::gateway {

namespace ssl = boost::asio::ssl;

// The TLS context from the certificate files and tls.crl (revoked clients
// fail the handshake).
absl::StatusOr<std::shared_ptr<ssl::context>> MakeRestTlsContext(const Config& config, bool client_certs) {
  auto tls = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  tls->set_options(ssl::context::no_sslv2 | ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                   ssl::context::no_tlsv1_1);
  tls->use_certificate_chain_file(config.tls.cert, ec);
  if (!ec) tls->use_private_key_file(config.tls.key, ssl::context::pem, ec);
  if (!ec) tls->load_verify_file(config.tls.ca, ec);
  if (ec) return absl::InvalidArgumentError(StrCat("listen.http: TLS files: ", ec.message()));
  if (!config.tls.crl.empty()) {
    auto crl = ReadFile(config.tls.crl);
    if (!crl.ok()) return crl.status();
    if (auto st = AddCrlsToStore(SSL_CTX_get_cert_store(tls->native_handle()), *crl); !st.ok()) {
      return absl::InvalidArgumentError(StrCat("tls.crl: ", config.tls.crl, ": ", st.message()));
    }
  }
  tls->set_verify_mode(client_certs ? ssl::verify_peer | ssl::verify_fail_if_no_peer_cert
                                    : ssl::verify_none);
  return tls;
}

absl::StatusOr<Identity> RestCaller(ssl_st* ssl, RevocationList& crl, const Config& config,
                                    GatewayCore* core, bool allow_peer_gateway) {
  const std::string pem = PeerCertificatePem(ssl);
  if (pem.empty()) return absl::UnauthenticatedError("no client certificate");
  // A keep-alive connection opened before a revocation is cut here.
  if (auto st = crl.Check(pem); !st.ok()) return st;
  auto id = IdentityFromCertPem(pem);
  if (!id.ok()) {
    return absl::UnauthenticatedError(StrCat("client certificate refused: ", id.status().message()));
  }
  if (allow_peer_gateway && id->role == Role::kGateway && core != nullptr) {
    if (auto st = Decide(*id, RpcClass::kPeer, config.federation, config.site,
                         [core](std::string_view site) { return core->IsApprovedPeer(site); });
        !st.ok()) {
      return st;
    }
    return id;
  }
  if (auto st = Decide(*id, RpcClass::kJob, config.federation, config.site,
                       [](std::string_view) { return false; });
      !st.ok()) {
    return st;
  }
  return id;
}

}  // namespace fedgate::gateway
