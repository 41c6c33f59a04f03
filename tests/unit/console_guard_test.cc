// fedctl console's guard: Host first (DNS rebinding), then the method, then
// the token (URL once, then the cookie), and a cancel only from its own page.
#include "gateway/cli/console/console_guard.h"

#include <gtest/gtest.h>

namespace fedgate::cli {
namespace {

const std::string kToken(64, 'a');

ConsoleGuard Guard() { return ConsoleGuard(kToken, {"127.0.0.1:8080", "localhost:8080"}); }

ConsoleRequest Req(std::string method, std::string target, std::string cookie = "",
                   std::string host = "127.0.0.1:8080") {
  ConsoleRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.host = std::move(host);
  r.cookie = std::move(cookie);
  return r;
}

std::string Cookie() { return "x=1; fedgate_console=" + kToken + "; y=2"; }

TEST(ConsoleGuard, TokenInTheUrlSetsTheCookieAndRedirectsWithoutIt) {
  auto v = Guard().Check(Req("GET", "/?token=" + kToken));
  EXPECT_EQ(v.status, 0);
  EXPECT_TRUE(v.set_cookie);
  EXPECT_EQ(v.redirect, "/");
  v = Guard().Check(Req("GET", "/index.html?a=1&token=" + kToken + "&b=2"));
  EXPECT_EQ(v.redirect, "/index.html?a=1&b=2");
  // An API call with the token is answered, not redirected.
  v = Guard().Check(Req("GET", "/v1/sites?token=" + kToken));
  EXPECT_EQ(v.status, 0);
  EXPECT_TRUE(v.redirect.empty());
  const std::string c = Guard().CookieValue();
  EXPECT_NE(c.find("HttpOnly"), std::string::npos);
  EXPECT_NE(c.find("SameSite=Strict"), std::string::npos);
  EXPECT_NE(c.find(kToken), std::string::npos);
}

TEST(ConsoleGuard, NoTokenOrAWrongOneIs401) {
  EXPECT_EQ(Guard().Check(Req("GET", "/")).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/v1/jobs")).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/?token=" + std::string(64, 'b'))).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/?token=" + kToken.substr(1))).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/", "fedgate_console=" + std::string(64, 'b'))).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/", "fedgate_console=")).status, 401);
  // A wrong token in the URL is refused even beside a good cookie.
  EXPECT_EQ(Guard().Check(Req("GET", "/?token=zz", Cookie())).status, 401);
  EXPECT_EQ(Guard().Check(Req("GET", "/v1/jobs", Cookie())).status, 0);
  EXPECT_EQ(ConsoleGuard("", {"127.0.0.1:8080"}).Check(Req("GET", "/", "fedgate_console=")).status, 401)
      << "an empty token never matches";
}

TEST(ConsoleGuard, AForeignHostIs403WhateverElseTheRequestCarries) {
  EXPECT_EQ(Guard().Check(Req("GET", "/?token=" + kToken, Cookie(), "evil.example:8080")).status, 403);
  EXPECT_EQ(Guard().Check(Req("GET", "/", Cookie(), "127.0.0.1:8081")).status, 403);
  EXPECT_EQ(Guard().Check(Req("GET", "/", Cookie(), "")).status, 403);
  EXPECT_EQ(Guard().Check(Req("POST", "/v1/jobs", Cookie(), "evil.example")).status, 403);
  EXPECT_EQ(Guard().Check(Req("GET", "/", Cookie(), "localhost:8080")).status, 0);
}

TEST(ConsoleGuard, OnlyGetAndACancelFromItsOwnPageAreAnswered) {
  EXPECT_EQ(Guard().Check(Req("POST", "/v1/jobs", Cookie())).status, 405);
  EXPECT_EQ(Guard().Check(Req("DELETE", "/v1/jobs/j1", Cookie())).status, 405);
  EXPECT_EQ(Guard().Check(Req("PUT", "/", Cookie())).status, 405);
  EXPECT_EQ(Guard().Check(Req("POST", "/v1/jobs/a/b:cancel", Cookie())).status, 405);
  EXPECT_EQ(Guard().Check(Req("POST", "/v1/jobs/:cancel", Cookie())).status, 405);
  auto cancel = Req("POST", "/v1/jobs/j1:cancel", Cookie());
  EXPECT_EQ(Guard().Check(cancel).status, 403) << "no Origin: not from the page";
  cancel.origin = "http://evil.example";
  EXPECT_EQ(Guard().Check(cancel).status, 403);
  cancel.origin = "http://127.0.0.1:8080";
  EXPECT_EQ(Guard().Check(cancel).status, 0);
  cancel.cookie = "";
  EXPECT_EQ(Guard().Check(cancel).status, 401);
}

TEST(ConsoleGuard, EveryResponseCarriesAStrictPolicy) {
  bool csp = false;
  for (const auto& [k, v] : ConsoleGuard::SecurityHeaders()) {
    if (k != "Content-Security-Policy") continue;
    csp = true;
    EXPECT_NE(v.find("script-src 'self'"), std::string::npos);
    EXPECT_EQ(v.find("unsafe-inline"), std::string::npos);
    EXPECT_NE(v.find("frame-ancestors 'none'"), std::string::npos);
  }
  EXPECT_TRUE(csp);
}

TEST(ConsoleGuard, TokensAreFreshAndLong) {
  const std::string a = NewConsoleToken(), b = NewConsoleToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace fedgate::cli
