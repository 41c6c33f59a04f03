// Names of sites, nodes, tenants and users: DNS-label style so they are safe in
// URIs, file names and metric labels.
#pragma once

#include <string_view>

namespace fedgate::federation {

// 1 to 63 characters of [a-z0-9-], not starting or ending with '-'.
bool IsValidName(std::string_view name);

// A job id as the coordinator makes them: "j-" and 16 lowercase hex digits.
// Checked wherever an id enters from the network (it becomes part of paths).
bool IsValidJobId(std::string_view id);

}  // namespace fedgate::federation
