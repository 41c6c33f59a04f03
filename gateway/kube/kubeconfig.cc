#include "gateway/kube/kubeconfig.h"

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/str_cat.h"

namespace fedgate::gateway::kube {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(what, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> Base64(const std::string& text, const std::string& what) {
  std::string in;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) in += c;
  }
  if (in.size() % 4 != 0) return absl::InvalidArgumentError(StrCat(what, ": not base64"));
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return absl::InvalidArgumentError(StrCat(what, ": not base64"));
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts padding as zero bytes.
  if (!in.empty() && in.back() == '=') --len;
  if (in.size() > 1 && in[in.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(dir) / p).string();
}

// field or field-data: the file's text, or the decoded data.
absl::StatusOr<std::string> FileOrData(const YAML::Node& map, const std::string& field,
                                       const std::string& dir, const std::string& where) {
  if (map[field + "-data"]) {
    return Base64(map[field + "-data"].as<std::string>(), StrCat(where, ".", field, "-data"));
  }
  if (map[field]) {
    return ReadFile(Resolve(dir, map[field].as<std::string>()), StrCat(where, ".", field));
  }
  return std::string();
}

// The entry named `name` of a kubeconfig list (clusters, users, contexts).
YAML::Node Named(const YAML::Node& list, const std::string& name) {
  if (!list.IsSequence()) return YAML::Node();
  for (const auto& e : list) {
    if (e["name"] && e["name"].as<std::string>() == name) return e;
  }
  return YAML::Node();
}

}  // namespace

absl::StatusOr<KubeAccess> LoadKubeconfig(const std::string& path) {
  auto text = ReadFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(StrCat("kubeconfig ", path, ": ", what));
  };
  try {
    const YAML::Node root = YAML::Load(*text);
    if (!root.IsMap()) return fail("not a kubeconfig (want a mapping)");
    const std::string current = root["current-context"] ? root["current-context"].as<std::string>() : "";
    if (current.empty()) return fail("no current-context");
    const YAML::Node ctx = Named(root["contexts"], current);
    if (!ctx || !ctx["context"]) return fail(StrCat("current-context \"", current, "\" is not in contexts"));
    const std::string cluster_name = ctx["context"]["cluster"] ? ctx["context"]["cluster"].as<std::string>() : "";
    const std::string user_name = ctx["context"]["user"] ? ctx["context"]["user"].as<std::string>() : "";
    const YAML::Node cluster = Named(root["clusters"], cluster_name);
    if (!cluster || !cluster["cluster"]) return fail(StrCat("cluster \"", cluster_name, "\" is not in clusters"));
    const YAML::Node c = cluster["cluster"];
    KubeAccess a;
    a.source = path;
    a.server = c["server"] ? c["server"].as<std::string>() : "";
    if (a.server.rfind("https://", 0) != 0) {
      return fail(StrCat("cluster \"", cluster_name, "\": server \"", a.server, "\" is not an https:// URL"));
    }
    while (a.server.size() > 8 && a.server.back() == '/') a.server.pop_back();
    a.insecure_skip_verify = c["insecure-skip-tls-verify"] && c["insecure-skip-tls-verify"].as<bool>();
    const std::string where_c = StrCat("clusters[", cluster_name, "]");
    auto ca = FileOrData(c, "certificate-authority", dir, where_c);
    if (!ca.ok()) return fail(std::string(ca.status().message()));
    a.ca_pem = *ca;
    if (!user_name.empty()) {
      const YAML::Node user = Named(root["users"], user_name);
      if (!user) return fail(StrCat("user \"", user_name, "\" is not in users"));
      const YAML::Node u = user["user"];
      if (u && u.IsMap()) {
        const std::string where_u = StrCat("users[", user_name, "]");
        auto cert = FileOrData(u, "client-certificate", dir, where_u);
        auto key = FileOrData(u, "client-key", dir, where_u);
        if (!cert.ok()) return fail(std::string(cert.status().message()));
        if (!key.ok()) return fail(std::string(key.status().message()));
        if (cert->empty() != key->empty()) {
          return fail(StrCat(where_u, ": client-certificate and client-key go together"));
        }
        a.cert_pem = *cert;
        a.key_pem = *key;
        if (u["token"]) a.token = u["token"].as<std::string>();
        if (u["tokenFile"]) a.token_file = Resolve(dir, u["tokenFile"].as<std::string>());
        if (!a.token_file.empty()) {
          auto t = ReadFile(a.token_file, StrCat(where_u, ".tokenFile"));
          if (!t.ok()) return fail(std::string(t.status().message()));
        }
      }
    }
    return a;
  } catch (const YAML::Exception& e) {
    return fail(e.what());
  }
}

absl::StatusOr<KubeAccess> InClusterAccess() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    return absl::FailedPreconditionError(
        "no kubernetes.kubeconfig and not in a pod (KUBERNETES_SERVICE_HOST/PORT are not set)");
  }
  const std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  KubeAccess a;
  a.source = "in-cluster service account";
  const std::string h(host);
  a.server = StrCat("https://", h.find(':') != std::string::npos ? StrCat("[", h, "]") : h, ":", port);
  auto ca = ReadFile(dir + "/ca.crt", "in-cluster CA");
  if (!ca.ok()) return ca.status();
  a.ca_pem = *ca;
  a.token_file = dir + "/token";
  auto t = ReadFile(a.token_file, "in-cluster token");
  if (!t.ok()) return t.status();
  return a;
}

std::string CurrentToken(const KubeAccess& a) {
  if (a.token_file.empty()) return a.token;
  auto t = ReadFile(a.token_file, "token");
  if (!t.ok()) return a.token;
  std::string s = *t;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace fedgate::gateway::kube
