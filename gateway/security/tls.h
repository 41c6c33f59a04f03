// mTLS credentials for the gateway's server, its outgoing peer links, and
// clients such as fedctl. Servers are verified by their SPIFFE identity, not
// by host name: endpoints are often bare IPs.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <functional>
#include <memory>
#include <string>

#include "gateway/security/identity.h"
#include "gateway/security/revocation.h"

namespace fedgate::gateway {

// Server credentials that re-read ca/cert/key every `reload_interval_s`
// (replaced files take effect for new connections) and require and verify a
// client certificate, refusing at the handshake those `crl` revokes.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const std::string& ca_path, const std::string& cert_path, const std::string& key_path,
    unsigned reload_interval_s, std::shared_ptr<RevocationList> crl = nullptr);

using ServerCheck = std::function<absl::Status(const Identity&)>;

// Client credentials over a certificate provider (file-watching or static);
// the handshake fails unless the server's certificate carries exactly one URI
// SAN that `check` accepts and, with `crl`, is not revoked.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider, ServerCheck check,
    std::shared_ptr<RevocationList> crl = nullptr);

// Credentials for dialing a peer: the server must be exactly the gateway of
// `site` in `federation`.
std::shared_ptr<grpc::ChannelCredentials> MakePeerGatewayCredentials(
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider,
    const std::string& federation, const std::string& site,
    std::shared_ptr<RevocationList> crl = nullptr);

std::shared_ptr<grpc::experimental::CertificateProviderInterface> MakeStaticProvider(
    const std::string& ca_pem, const std::string& cert_pem, const std::string& key_pem);

// Channel arguments every fedgate channel uses: short reconnect backoff caps.
grpc::ChannelArguments DefaultChannelArgs();

// The one way fedgate dials a gateway: mTLS with `provider`'s identity, the
// server's certificate accepted by `check`, DefaultChannelArgs; a
// `max_reply_bytes` above 0 raises the receive limit.
std::shared_ptr<grpc::Channel> DialGateway(
    const std::string& endpoint,
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider, ServerCheck check,
    int max_reply_bytes = 0);
// ... where the server must be exactly the gateway of `site` in `federation`.
std::shared_ptr<grpc::Channel> DialPeerGateway(
    const std::string& endpoint,
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider,
    const std::string& federation, const std::string& site, int max_reply_bytes = 0,
    std::shared_ptr<RevocationList> crl = nullptr);

}  // namespace fedgate::gateway
