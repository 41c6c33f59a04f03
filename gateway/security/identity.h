// SPIFFE-style identities (DESIGN.md "Identity and authorization"):
//   spiffe://<federation>/site/<site>/gateway
//   spiffe://<federation>/site/<site>/admin/<name>
//   spiffe://<federation>/tenant/<tenant>/user/<name>
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedgate::gateway {

enum class Role { kGateway, kAdmin, kUser };
std::string_view RoleName(Role r);

struct Identity {
  std::string federation;
  Role role = Role::kUser;
  std::string site;    // gateway and admin
  std::string tenant;  // user
  std::string name;    // admin and user
  std::string ToUri() const;
};

absl::StatusOr<Identity> ParseSpiffeId(std::string_view uri);

// The identity of a PEM certificate: it must carry exactly one URI SAN, and that
// URI must be a valid identity.
absl::StatusOr<Identity> IdentityFromCertPem(std::string_view pem);
absl::StatusOr<Identity> IdentityFromCertDer(std::string_view der);

}  // namespace fedgate::gateway
