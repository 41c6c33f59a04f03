#include "federation/names.h"

namespace fedgate::federation {

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name.front() == '-' || name.back() == '-') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsValidJobId(std::string_view id) {
  if (id.size() != 18 || id.substr(0, 2) != "j-") return false;
  for (char c : id.substr(2)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace fedgate::federation
