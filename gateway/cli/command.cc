#include "gateway/cli/command.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/status/status.h"
#include "base/str_cat.h"
#include "base/text.h"
#include "federation/names.h"
#include "gateway/security/certs.h"
#include "gateway/security/identity.h"
#include "gateway/security/tls.h"

namespace fedgate::cli {

void Die(const std::string& msg, int code) {
  std::fprintf(stderr, "fedctl: %s\n", msg.c_str());
  std::exit(code);
}

Format Globals::format() const {
  const std::string& o = output;
  if (o == "table") return Format::kTable;
  if (o == "json") return Format::kJson;
  if (o == "yaml") return Format::kYaml;
  Die(fedgate::StrCat("unknown output format \"", o, "\" (want table, json or yaml)"), 2);
}

// --site, else $FEDCTL_SITE, else DIR/site; "" accepts any gateway.
static std::string PinnedSite(const Globals& g, const std::string& dir) {
  std::string site = g.site;
  if (site.empty()) {
    const char* env = std::getenv("FEDCTL_SITE");
    if (env != nullptr) site = env;
  }
  if (site.empty()) {
    if (auto f = fedgate::gateway::ReadFile(dir + "/site"); f.ok()) site = std::string(fedgate::Trim(*f));
  }
  if (!site.empty() && !fedgate::federation::IsValidName(site)) {
    Die(fedgate::StrCat("--site: invalid site name \"", site, "\""), 2);
  }
  return site;
}

std::string TlsDir(const Globals& g) {
  if (!g.tls_dir.empty()) return g.tls_dir;
  const char* env = std::getenv("FEDCTL_TLS_DIR");
  if (env == nullptr || *env == '\0') {
    Die("no TLS identity: pass --tls-dir DIR (with ca.pem, cert.pem, key.pem) or set "
        "FEDCTL_TLS_DIR",
        2);
  }
  return env;
}

std::string GatewayEndpoint(const Globals& g) {
  if (!g.gateway.empty()) return g.gateway;
  const char* env = std::getenv("FEDCTL_GATEWAY");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:7443";
}

std::shared_ptr<grpc::Channel> Connect(const Globals& g) {
  const std::string dir = TlsDir(g);
  auto ca = fedgate::gateway::ReadFile(dir + "/ca.pem");
  auto cert = fedgate::gateway::ReadFile(dir + "/cert.pem");
  auto key = fedgate::gateway::ReadFile(dir + "/key.pem");
  if (!ca.ok() || !cert.ok() || !key.ok()) {
    Die(fedgate::StrCat("cannot read ca.pem, cert.pem and key.pem in ", dir));
  }
  auto me = fedgate::gateway::IdentityFromCertPem(*cert);
  if (!me.ok()) Die(fedgate::StrCat(dir, "/cert.pem: ", me.status().message()));
  const std::string endpoint = GatewayEndpoint(g);
  const std::string federation = me->federation;
  const std::string site = PinnedSite(g, dir);
  return fedgate::gateway::DialGateway(
      endpoint, fedgate::gateway::MakeStaticProvider(*ca, *cert, *key),
      [federation, site](const fedgate::gateway::Identity& id) {
        if (id.role != fedgate::gateway::Role::kGateway || id.federation != federation) {
          return absl::PermissionDeniedError(
              fedgate::StrCat("server ", id.ToUri(), " is not a gateway of ", federation));
        }
        if (!site.empty() && id.site != site) {
          return absl::PermissionDeniedError(fedgate::StrCat(
              "server is the gateway of site ", id.site, ", not of ", site, " (--site)"));
        }
        return absl::OkStatus();
      });
}

void CheckRpc(const grpc::Status& st, const Globals& g, const char* what) {
  if (st.ok()) return;
  std::string msg = st.error_message();
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
      st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    msg = fedgate::StrCat("gateway ", g.gateway.empty() ? "(default)" : g.gateway,
                       " unreachable or refused the TLS handshake: ", msg);
  }
  Die(fedgate::StrCat(what, " failed (", absl::StatusCodeToString(
                                           static_cast<absl::StatusCode>(st.error_code())),
                   "): ", msg));
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

void Print(const google::protobuf::Message& msg, Format f, const std::string& table) {
  switch (f) {
    case Format::kJson:
      std::cout << ToJson(msg) << "\n";
      break;
    case Format::kYaml:
      std::cout << JsonToYaml(ToJson(msg)) << "\n";
      break;
    case Format::kTable:
      std::cout << table;
      break;
  }
}

}  // namespace fedgate::cli
