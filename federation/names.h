// Names of sites, nodes, tenants and users: DNS-label style so they are safe in
// URIs, file names and metric labels.
#pragma once

#include <string_view>

namespace fedgate::federation {

// 1 to 63 characters of [a-z0-9-], not starting or ending with '-'.
bool IsValidName(std::string_view name);

}  // namespace fedgate::federation
