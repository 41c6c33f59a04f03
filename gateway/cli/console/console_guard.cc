#include "gateway/cli/console/console_guard.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <stdexcept>

#include "base/str_cat.h"
#include "gateway/api/rest_routes.h"

namespace fedgate::cli {

ConsoleGuard::ConsoleGuard(std::string token, std::vector<std::string> hosts)
    : token_(std::move(token)), hosts_(std::move(hosts)) {}

std::string ConsoleGuard::PathOf(std::string_view target) {
  return std::string(target.substr(0, target.find('?')));
}

std::string ConsoleGuard::QueryParam(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  const auto params = gateway::ParseQuery(target.substr(q + 1));
  const auto it = params.find(std::string(name));
  return it == params.end() ? "" : it->second;
}

bool ConsoleGuard::TokenMatches(std::string_view candidate) const {
  return candidate.size() == token_.size() && !token_.empty() &&
         CRYPTO_memcmp(candidate.data(), token_.data(), token_.size()) == 0;
}

namespace {

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "".
std::string CookieOf(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view part = header.substr(0, semi);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    const size_t eq = part.find('=');
    if (eq != std::string_view::npos && part.substr(0, eq) == name) {
      return std::string(part.substr(eq + 1));
    }
    if (semi == std::string_view::npos) break;
    header = header.substr(semi + 1);
  }
  return "";
}

bool IsCancel(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/jobs/", kSuffix = ":cancel";
  return path.size() > kPrefix.size() + kSuffix.size() && path.starts_with(kPrefix) &&
         path.ends_with(kSuffix) &&
         path.substr(kPrefix.size()).find('/') == std::string_view::npos;
}

// The target without its token parameter, for the redirect after login.
std::string WithoutToken(std::string_view target) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::string(target);
  std::string out(target.substr(0, q)), kept;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    if (!kv.starts_with("token=") && kv != "token" && !kv.empty()) {
      kept += StrCat(kept.empty() ? "" : "&", kv);
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return kept.empty() ? out : StrCat(out, "?", kept);
}

}  // namespace

GuardVerdict ConsoleGuard::Check(const ConsoleRequest& req) const {
  GuardVerdict v;
  // First, whatever else the request carries: a page of another origin
  // that rebound its name to this address must not read or act here.
  bool known_host = false;
  for (const auto& h : hosts_) known_host = known_host || req.host == h;
  if (!known_host) {
    v.status = 403;
    v.message = StrCat("Host \"", req.host.substr(0, 100), "\" is not this console's address");
    return v;
  }
  const std::string path = PathOf(req.target);
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool cancel = req.method == "POST" && IsCancel(path);
  if (!get && !cancel) {
    v.status = 405;
    v.message = StrCat(req.method.substr(0, 20), " ", path.substr(0, 100),
                       " is not answered here: the console reads, and cancels jobs");
    return v;
  }
  const std::string url_token = QueryParam(req.target, "token");
  const std::string cookie = CookieOf(req.cookie, kCookieName);
  if (!url_token.empty()) {
    if (!TokenMatches(url_token)) {
      v.status = 401;
      v.message = "wrong token: use the URL fedctl console printed";
      return v;
    }
    v.set_cookie = true;
    if (get && !path.starts_with("/v1/")) v.redirect = WithoutToken(req.target);
    return v;
  }
  if (!TokenMatches(cookie)) {
    v.status = 401;
    v.message = "no token: open the URL fedctl console printed";
    return v;
  }
  // A cancel comes from this console's own page: a browser sends Origin
  // with every POST, and it must be this console.
  if (cancel) {
    bool same = false;
    for (const auto& h : hosts_) same = same || req.origin == StrCat("http://", h);
    if (!same) {
      v.status = 403;
      v.message = StrCat("Origin \"", req.origin.substr(0, 100), "\" may not cancel jobs here");
    }
  }
  return v;
}

std::string ConsoleGuard::CookieValue() const {
  return StrCat(kCookieName, "=", token_, "; HttpOnly; SameSite=Strict; Path=/");
}

std::vector<std::pair<std::string, std::string>> ConsoleGuard::SecurityHeaders() {
  return {
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"X-Frame-Options", "DENY"},
      {"Cache-Control", "no-store"},
  };
}

std::string NewConsoleToken() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) throw std::runtime_error("no randomness for the token");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace fedgate::cli
