#include "gateway/security/tls.h"

#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "base/str_cat.h"

namespace fedgate::gateway {
namespace {

namespace gx = grpc::experimental;

class ServerIdentityVerifier final : public gx::ExternalCertificateVerifier {
 public:
  ServerIdentityVerifier(ServerCheck check, std::shared_ptr<RevocationList> crl)
      : check_(std::move(check)), crl_(std::move(crl)) {}

  bool Verify(gx::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    if (crl_ != nullptr) {
      const auto pem = request->peer_cert();
      if (auto st = crl_->Check(std::string_view(pem.data(), pem.size())); !st.ok()) {
        *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                    fedgate::StrCat("server refused: ", st.message()));
        return true;
      }
    }
    auto uris = request->uri_names();
    if (uris.size() != 1) {
      *sync_status = grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          fedgate::StrCat("server certificate has ", uris.size(), " URI SANs, want exactly one"));
      return true;
    }
    auto id = ParseSpiffeId(std::string_view(uris[0].data(), uris[0].size()));
    absl::Status st = id.ok() ? check_(*id) : id.status();
    *sync_status = st.ok() ? grpc::Status::OK
                           : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                          fedgate::StrCat("server identity refused: ", st.message()));
    return true;
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  ServerCheck check_;
  std::shared_ptr<RevocationList> crl_;
};

// The chain was verified by TLS; this refuses revoked client certificates
// at the handshake (identities are checked per call).
class ClientRevocationVerifier final : public gx::ExternalCertificateVerifier {
 public:
  explicit ClientRevocationVerifier(std::shared_ptr<RevocationList> crl) : crl_(std::move(crl)) {}

  bool Verify(gx::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const auto pem = request->peer_cert();
    auto st = crl_->Check(std::string_view(pem.data(), pem.size()));
    *sync_status = st.ok() ? grpc::Status::OK
                           : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(st.message()));
    return true;
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  std::shared_ptr<RevocationList> crl_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const std::string& ca_path,
                                                               const std::string& cert_path,
                                                               const std::string& key_path,
                                                               unsigned reload_interval_s,
                                                               std::shared_ptr<RevocationList> crl) {
  auto provider = std::make_shared<gx::FileWatcherCertificateProvider>(key_path, cert_path,
                                                                       ca_path, reload_interval_s);
  gx::TlsServerCredentialsOptions opts(provider);
  opts.watch_root_certs();
  opts.watch_identity_key_cert_pairs();
  opts.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  // Chain verification is done by TLS; the identity is checked per call.
  if (crl != nullptr && !crl->path().empty()) {
    opts.set_certificate_verifier(
        gx::ExternalCertificateVerifier::Create<ClientRevocationVerifier>(std::move(crl)));
  } else {
    opts.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  }
  return grpc::experimental::TlsServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    std::shared_ptr<gx::CertificateProviderInterface> provider, ServerCheck check,
    std::shared_ptr<RevocationList> crl) {
  gx::TlsChannelCredentialsOptions opts;
  opts.set_certificate_provider(std::move(provider));
  opts.watch_root_certs();
  opts.watch_identity_key_cert_pairs();
  opts.set_verify_server_certs(true);
  opts.set_check_call_host(false);
  opts.set_certificate_verifier(
      gx::ExternalCertificateVerifier::Create<ServerIdentityVerifier>(std::move(check),
                                                                      std::move(crl)));
  return grpc::experimental::TlsCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> MakePeerGatewayCredentials(
    std::shared_ptr<gx::CertificateProviderInterface> provider, const std::string& federation,
    const std::string& site, std::shared_ptr<RevocationList> crl) {
  const std::string expected = Identity{federation, Role::kGateway, site, "", ""}.ToUri();
  return MakeChannelCredentials(
      std::move(provider),
      [expected](const Identity& id) {
        if (id.ToUri() != expected) {
          return absl::PermissionDeniedError(
              fedgate::StrCat("want ", expected, ", got ", id.ToUri()));
        }
        return absl::OkStatus();
      },
      std::move(crl));
}

std::shared_ptr<gx::CertificateProviderInterface> MakeStaticProvider(const std::string& ca_pem,
                                                                     const std::string& cert_pem,
                                                                     const std::string& key_pem) {
  std::vector<gx::IdentityKeyCertPair> pairs = {{key_pem, cert_pem}};
  return std::make_shared<gx::StaticDataCertificateProvider>(ca_pem, pairs);
}

grpc::ChannelArguments DefaultChannelArgs() {
  constexpr int kConnectAttemptTimeoutMs = 10000;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Despite its name, gRPC 1.51 uses GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the
  // minimum deadline of one connection attempt (TCP connect + TLS handshake +
  // peer check; subchannel.cc: deadline = max(next backoff, min timeout)).
  // Set to 100 ms it made every handshake that took longer than the current
  // backoff (32 at once on a loaded 2-core host) fail with "Handshake timed
  // out" and the channel fail calls fast. Connection attempts get a real bound.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptTimeoutMs);
  return args;
}

std::shared_ptr<grpc::Channel> DialGateway(
    const std::string& endpoint,
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider, ServerCheck check,
    int max_reply_bytes) {
  auto args = DefaultChannelArgs();
  if (max_reply_bytes > 0) args.SetMaxReceiveMessageSize(max_reply_bytes);
  return grpc::CreateCustomChannel(
      endpoint, MakeChannelCredentials(std::move(provider), std::move(check)), args);
}

std::shared_ptr<grpc::Channel> DialPeerGateway(
    const std::string& endpoint,
    std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider,
    const std::string& federation, const std::string& site, int max_reply_bytes,
    std::shared_ptr<RevocationList> crl) {
  auto args = DefaultChannelArgs();
  if (max_reply_bytes > 0) args.SetMaxReceiveMessageSize(max_reply_bytes);
  return grpc::CreateCustomChannel(
      endpoint, MakePeerGatewayCredentials(std::move(provider), federation, site, std::move(crl)),
      args);
}

}  // namespace fedgate::gateway
