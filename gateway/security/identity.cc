#include "gateway/security/identity.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <vector>

#include "base/str_cat.h"
#include "federation/names.h"

namespace fedgate::gateway {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kGateway:
      return "gateway";
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      return "user";
  }
  return "unknown";
}

std::string Identity::ToUri() const {
  switch (role) {
    case Role::kGateway:
      return fedgate::StrCat("spiffe://", federation, "/site/", site, "/gateway");
    case Role::kAdmin:
      return fedgate::StrCat("spiffe://", federation, "/site/", site, "/admin/", name);
    case Role::kUser:
      return fedgate::StrCat("spiffe://", federation, "/tenant/", tenant, "/user/", name);
  }
  return "";
}

absl::StatusOr<Identity> ParseSpiffeId(std::string_view uri) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fedgate::StrCat("invalid identity \"", uri, "\": ", why));
  };
  constexpr std::string_view kScheme = "spiffe://";
  if (!uri.starts_with(kScheme)) return bad("not a spiffe:// URI");
  std::vector<std::string_view> parts;
  std::string_view rest = uri.substr(kScheme.size());
  for (size_t pos; (pos = rest.find('/')) != std::string_view::npos; rest.remove_prefix(pos + 1)) {
    parts.push_back(rest.substr(0, pos));
  }
  parts.push_back(rest);
  for (auto p : parts) {
    if (!federation::IsValidName(p)) return bad(fedgate::StrCat("bad path segment \"", p, "\""));
  }
  Identity id;
  id.federation = std::string(parts[0]);
  if (parts.size() == 4 && parts[1] == "site" && parts[3] == "gateway") {
    id.role = Role::kGateway;
    id.site = std::string(parts[2]);
  } else if (parts.size() == 5 && parts[1] == "site" && parts[3] == "admin") {
    id.role = Role::kAdmin;
    id.site = std::string(parts[2]);
    id.name = std::string(parts[4]);
  } else if (parts.size() == 5 && parts[1] == "tenant" && parts[3] == "user") {
    id.role = Role::kUser;
    id.tenant = std::string(parts[2]);
    id.name = std::string(parts[4]);
  } else {
    return bad("want /site/S/gateway, /site/S/admin/N or /tenant/T/user/N");
  }
  return id;
}

namespace {

absl::StatusOr<Identity> IdentityOf(X509* cert) {
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  std::vector<std::string> uris;
  if (names != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names, i);
      if (gn->type != GEN_URI) continue;
      const ASN1_IA5STRING* s = gn->d.uniformResourceIdentifier;
      uris.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                        ASN1_STRING_length(s));
    }
    GENERAL_NAMES_free(names);
  }
  if (uris.size() != 1) {
    return absl::InvalidArgumentError(fedgate::StrCat(
        "certificate must carry exactly one URI SAN, it has ", uris.size()));
  }
  return ParseSpiffeId(uris[0]);
}

}  // namespace

absl::StatusOr<Identity> IdentityFromCertPem(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), pem.size()),
                                                &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) return absl::InvalidArgumentError("peer certificate is not valid PEM");
  return IdentityOf(cert.get());
}

absl::StatusOr<Identity> IdentityFromCertDer(std::string_view der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      d2i_X509(nullptr, &p, static_cast<long>(der.size())), &X509_free);
  if (!cert) return absl::InvalidArgumentError("certificate is not valid DER");
  return IdentityOf(cert.get());
}

}  // namespace fedgate::gateway
