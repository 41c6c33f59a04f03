#include "federation/peer_registry.h"

#include <cctype>

#include "base/str_cat.h"
#include "federation/names.h"

namespace fedgate::federation {

std::string_view PeerStateName(PeerState s) {
  switch (s) {
    case PeerState::kConnecting:
      return "connecting";
    case PeerState::kUp:
      return "up";
    case PeerState::kDown:
      return "down";
  }
  return "unknown";
}

absl::Status ValidateEndpoint(std::string_view endpoint, bool allow_zero_port) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        fedgate::StrCat("invalid endpoint \"", endpoint, "\": ", why, " (want HOST:PORT)"));
  };
  size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return bad("missing port");
  std::string_view host = endpoint.substr(0, colon);
  std::string_view port = endpoint.substr(colon + 1);
  if (host.empty()) return bad("missing host");
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return bad("unbalanced brackets");
  } else {
    for (char c : host) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) {
        return bad(fedgate::StrCat("bad character '", std::string(1, c), "' in host"));
      }
    }
  }
  if (port.empty() || port.size() > 5) return bad("bad port");
  int p = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("port is not a number");
    p = p * 10 + (c - '0');
  }
  if (p > 65535 || (p == 0 && !allow_zero_port)) return bad("port out of range");
  return absl::OkStatus();
}

PeerRegistry::PeerRegistry(std::string self_site, const Clock* clock, int64_t down_after_ms)
    : self_(std::move(self_site)), clock_(clock), down_after_ms_(down_after_ms) {}

absl::Status PeerRegistry::Validate(std::string_view site, std::string_view endpoint) const {
  if (!IsValidName(site)) {
    return absl::InvalidArgumentError(
        fedgate::StrCat("invalid site name \"", site, "\" (want 1-63 of [a-z0-9-])"));
  }
  if (site == self_) {
    return absl::InvalidArgumentError(fedgate::StrCat("site \"", site, "\" is this gateway itself"));
  }
  return ValidateEndpoint(endpoint);
}

absl::Status PeerRegistry::Add(std::string_view site, std::string_view endpoint,
                               std::string_view source) {
  if (auto st = Validate(site, endpoint); !st.ok()) return st;
  auto it = peers_.find(site);
  if (it == peers_.end()) {
    PeerInfo info;
    info.site = std::string(site);
    info.endpoint = std::string(endpoint);
    info.source = std::string(source);
    peers_.emplace(info.site, std::move(info));
  } else {
    it->second.endpoint = std::string(endpoint);
    if (it->second.source != "config") it->second.source = std::string(source);
  }
  return absl::OkStatus();
}

absl::Status PeerRegistry::Remove(std::string_view site) {
  auto it = peers_.find(site);
  if (it == peers_.end()) {
    return absl::NotFoundError(fedgate::StrCat("no approved peer \"", site, "\""));
  }
  if (it->second.source == "config") {
    return absl::FailedPreconditionError(fedgate::StrCat(
        "peer \"", site, "\" is declared in the config file; remove it there and restart"));
  }
  peers_.erase(it);
  return absl::OkStatus();
}

bool PeerRegistry::IsApproved(std::string_view site) const { return peers_.contains(site); }

void PeerRegistry::Heard(std::string_view site) {
  auto it = peers_.find(site);
  if (it != peers_.end()) it->second.last_heard_ms = clock_->NowMs();
}

void PeerRegistry::RecordPush(std::string_view site, double rtt_ms) {
  auto it = peers_.find(site);
  if (it == peers_.end()) return;
  it->second.last_heard_ms = clock_->NowMs();
  it->second.rtt_ms = rtt_ms;
  it->second.last_error.clear();
}

void PeerRegistry::RecordError(std::string_view site, std::string_view error) {
  auto it = peers_.find(site);
  if (it != peers_.end()) it->second.last_error = std::string(error);
}

PeerState PeerRegistry::StateOf(std::string_view site) const {
  auto it = peers_.find(site);
  if (it == peers_.end() || it->second.last_heard_ms < 0) return PeerState::kConnecting;
  return clock_->NowMs() - it->second.last_heard_ms <= down_after_ms_ ? PeerState::kUp
                                                                       : PeerState::kDown;
}

std::vector<PeerInfo> PeerRegistry::List() const {
  std::vector<PeerInfo> out;
  for (const auto& [site, info] : peers_) out.push_back(info);
  return out;
}

int PeerRegistry::CountUp() const {
  int n = 0;
  for (const auto& [site, info] : peers_) n += StateOf(site) == PeerState::kUp ? 1 : 0;
  return n;
}

}  // namespace fedgate::federation
