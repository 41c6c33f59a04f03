// Who may ask `fedctl console` for what, as a pure function of one HTTP
// request: the Host header (DNS rebinding), the method (GET, and POST only
// for a job's cancel), and the token (in the URL once, then an HttpOnly,
// SameSite=Strict cookie). No socket involved, so it is tested alone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fedgate::cli {

struct ConsoleRequest {
  std::string method;
  std::string target;  // path and query, as sent
  std::string host;    // the Host header
  std::string cookie;  // the Cookie header
  std::string origin;  // the Origin header; empty when absent
};

struct GuardVerdict {
  int status = 0;            // 0: serve it; else answer this HTTP status
  std::string message;       // why, for the error body
  bool set_cookie = false;   // the request carried the right token in its URL
  std::string redirect;      // with set_cookie: the same page without the token
};

class ConsoleGuard {
 public:
  static constexpr std::string_view kCookieName = "fedgate_console";
  // `hosts`: the Host header values that name this console (its address:port,
  // and localhost:port when it listens on loopback).
  ConsoleGuard(std::string token, std::vector<std::string> hosts);

  GuardVerdict Check(const ConsoleRequest& req) const;
  // The Set-Cookie value for a request the token admitted.
  std::string CookieValue() const;
  // Every response carries these (CSP, no sniffing, no referrer, no framing).
  static std::vector<std::pair<std::string, std::string>> SecurityHeaders();
  // The path without its query, and one query parameter's value ("" if absent).
  static std::string PathOf(std::string_view target);
  static std::string QueryParam(std::string_view target, std::string_view name);

 private:
  bool TokenMatches(std::string_view candidate) const;
  std::string token_;
  std::vector<std::string> hosts_;
};

// A fresh random token: 32 bytes from the kernel, hex.
std::string NewConsoleToken();

}  // namespace fedgate::cli
