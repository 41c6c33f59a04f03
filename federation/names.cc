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

}  // namespace fedgate::federation
