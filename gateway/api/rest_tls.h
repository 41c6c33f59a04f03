// The REST server's TLS context: the certificate files, the trust file and
// tls.crl (revoked clients fail the handshake); client certificates required
// unless `client_certs` is false (listen.serve: bearer tokens instead).
#pragma once

#include <memory>

#include <boost/asio/ssl.hpp>

#include "absl/status/statusor.h"
#include "gateway/config/config.h"
#include "gateway/security/identity.h"

namespace fedgate::gateway {

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeRestTlsContext(const Config& config,
                                                                            bool client_certs = true);

class GatewayCore;
class RevocationList;

// Who called over the TLS connection `ssl`: a revoked or unusable client
// certificate is refused, and the identity must be allowed the job API (a
// tenant's user or this site's admin) or, with `allow_peer_gateway`, be an
// approved peer's gateway (a relayed service request).
absl::StatusOr<Identity> RestCaller(ssl_st* ssl, RevocationList& crl, const Config& config,
                                    GatewayCore* core, bool allow_peer_gateway);

}  // namespace fedgate::gateway
