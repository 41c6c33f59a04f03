#include "federation/mig.h"

#include <cctype>
#include <cstdio>
#include <iterator>
#include <optional>

#include "base/str_cat.h"

namespace fedgate::federation {
namespace {

constexpr std::string_view kMigInfix = " MIG ";

// Leading digits of `s` from `*i` ("" when none).
std::string_view Digits(std::string_view s, size_t* i) {
  const size_t from = *i;
  while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i]))) ++*i;
  return s.substr(from, *i - from);
}

uint64_t Fnv1a(std::string_view s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

bool IsMigProfile(std::string_view p) {
  size_t i = 0;
  const auto g = Digits(p, &i);
  if (g.empty() || g.size() > 1 || g == "0" || p.substr(i, 2) != "g.") return false;
  i += 2;
  const auto mem = Digits(p, &i);
  return !mem.empty() && mem.size() <= 3 && mem[0] != '0' && p.substr(i) == "gb";
}

uint32_t MigProfileMemoryGib(std::string_view p) {
  const size_t dot = p.find('.');
  if (dot == std::string_view::npos) return 0;
  uint32_t mem = 0;
  for (size_t i = dot + 1; i < p.size() && std::isdigit(static_cast<unsigned char>(p[i])); ++i) {
    mem = mem * 10 + static_cast<uint32_t>(p[i] - '0');
  }
  return mem;
}

std::string MigModel(std::string_view base_model, std::string_view profile) {
  return StrCat(base_model, kMigInfix, profile);
}

std::string MigProfileOf(std::string_view model) {
  const size_t at = model.rfind(kMigInfix);
  return at == std::string_view::npos ? "" : std::string(model.substr(at + kMigInfix.size()));
}

std::string DerivedMigUuid(std::string_view site, std::string_view node, uint32_t gpu, uint32_t index) {
  const std::string key = StrCat(site, "/", node, "/", gpu, "/", index);
  const uint64_t a = Fnv1a(key, 0), b = Fnv1a(key, 0x9e3779b97f4a7c15ull);
  char out[64];
  std::snprintf(out, sizeof(out), "MIG-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffull));
  return out;
}

absl::StatusOr<std::vector<Node>> ExpandMig(const std::string& site, const Node& node,
                                            std::map<uint32_t, std::vector<MigSlice>> mig) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(StrCat("node ", node.name, ": mig: ", parts...));
  };
  std::map<std::string, Node> by_profile;
  for (auto& [gpu, slices] : mig) {
    if (gpu >= node.gpus) return bad("GPU ", gpu, " is not one of its ", node.gpus, " GPU(s)");
    if (slices.empty()) return bad("GPU ", gpu, " lists no slices");
    if (slices.size() > 7) return bad("GPU ", gpu, " has ", slices.size(), " slices (at most 7)");
    for (size_t i = 0; i < slices.size(); ++i) {
      auto& s = slices[i];
      if (!IsMigProfile(s.profile)) {
        return bad("\"", s.profile.substr(0, 20), "\" is not a MIG profile (want e.g. 1g.10gb)");
      }
      if (s.uuid.empty()) {
        s.uuid = DerivedMigUuid(site, node.name, gpu, static_cast<uint32_t>(i));
        s.derived = true;
      } else if (s.uuid.rfind("MIG-", 0) != 0 || s.uuid.size() > 80) {
        return bad("uuid \"", s.uuid.substr(0, 40), "\" must start with MIG-");
      }
      Node& n = by_profile[s.profile];
      if (n.name.empty()) {
        n = node;
        std::string suffix = s.profile;
        for (char& c : suffix) c = c == '.' ? '-' : c;
        n.name = StrCat(node.name, "-mig-", suffix);
        if (n.name.size() > 63) return bad("node name ", n.name, " would be longer than 63");
        n.gpu_model = MigModel(node.gpu_model, s.profile);
        n.gpu_memory_gib = MigProfileMemoryGib(s.profile);
        n.gpus = 0;
        n.devices.clear();
        n.labels["fedgate.io/mig-parent"] = node.name;
      }
      ++n.gpus;
      n.devices.push_back(s.uuid);
      if (s.derived) n.labels["fedgate.io/mig-uuids"] = "derived";
    }
  }
  std::vector<Node> out;
  Node whole = node;
  whole.gpus = 0;
  whole.devices.clear();
  for (uint32_t g = 0; g < node.gpus; ++g) {
    if (mig.contains(g)) continue;
    ++whole.gpus;
    whole.devices.push_back(node.devices.empty() ? std::to_string(g) : node.devices[g]);
  }
  if (whole.gpus > 0) out.push_back(std::move(whole));
  for (auto& [profile, n] : by_profile) out.push_back(std::move(n));
  return out;
}

absl::StatusOr<std::map<uint32_t, std::vector<MigSlice>>> ParseNvidiaSmiList(std::string_view text) {
  std::map<uint32_t, std::vector<MigSlice>> out;
  std::optional<uint32_t> gpu;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    const auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat("nvidia-smi -L line ", line_no, " (\"",
                                               line.substr(0, 80), "\"): ", why));
    };
    if (line.rfind("GPU ", 0) == 0) {
      size_t i = 4;
      const auto index = Digits(line, &i);
      if (index.empty() || index.size() > 4 || line.substr(i, 1) != ":") return bad("no GPU index");
      gpu = static_cast<uint32_t>(std::stoul(std::string(index)));
      out[*gpu];  // a GPU without MIG devices is listed too
      continue;
    }
    if (line.rfind("MIG ", 0) != 0) continue;
    if (!gpu) return bad("a MIG device before any GPU");
    std::string_view rest = line.substr(4);
    const std::string profile(rest.substr(0, rest.find_first_of(" \t")));
    if (!IsMigProfile(profile)) return bad(StrCat("\"", profile.substr(0, 20), "\" is not a MIG profile fedgate knows"));
    const size_t at = line.find("(UUID: ");
    const size_t end = at == std::string_view::npos ? at : line.find(')', at);
    if (end == std::string_view::npos) return bad("no (UUID: …)");
    std::string uuid(line.substr(at + 7, end - at - 7));
    if (uuid.rfind("MIG-", 0) != 0 || uuid.size() > 80) return bad("the UUID does not start with MIG-");
    out[*gpu].push_back({profile, std::move(uuid), false});
  }
  // GPUs without MIG devices stay whole.
  for (auto it = out.begin(); it != out.end();) it = it->second.empty() ? out.erase(it) : std::next(it);
  return out;
}

}  // namespace fedgate::federation
