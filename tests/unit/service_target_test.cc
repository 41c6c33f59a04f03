// The service proxy's pure parts: the address a request names, the
// headers it drops, and the bearer tokens it stores (as hashes, in a real
// SQLite store).
#include <gtest/gtest.h>

#include "gateway/serve/service_target.h"
#include "gateway/serve/service_tokens.h"
#include "gateway/store/store.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

TEST(ServiceTarget, ThePrefixGoesAndThePathAndQueryStay) {
  auto t = ParseServiceTarget("/v1/services/chat/v1/predict?model=7b&x=%20y");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "chat");
  EXPECT_EQ(t->path, "/v1/predict?model=7b&x=%20y");
  EXPECT_EQ(ParseServiceTarget("/v1/services/chat/")->path, "/");
  EXPECT_TRUE(IsServiceProxyTarget("/v1/services/chat/x"));
  // The API's own addresses are not the proxy's.
  EXPECT_FALSE(IsServiceProxyTarget("/v1/services"));
  EXPECT_FALSE(IsServiceProxyTarget("/v1/services/chat"));
  EXPECT_FALSE(IsServiceProxyTarget("/v1/services?name=chat/x"));
  EXPECT_FALSE(IsServiceProxyTarget("/v1/jobs/x/"));
}

TEST(ServiceTarget, HostilePathsAreRefusedNamingWhy) {
  auto why = [](const char* target) {
    auto t = ParseServiceTarget(target);
    return t.ok() ? std::string("accepted") : std::string(t.status().message());
  };
  EXPECT_NE(why("/v1/services/chat/../../v1/jobs").find("\"..\" segment"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a/%2e%2E/b").find("\"..\" segment"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/./x").find("\".\" segment"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a%2Fb").find("encoded slash"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a%5cb").find("encoded slash"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a%00b").find("control character"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a%zz").find("bad %-escape"), std::string::npos);
  EXPECT_NE(why("/v1/services/chat/a%2").find("bad %-escape"), std::string::npos);
  EXPECT_NE(why("/v1/services/Chat!/x").find("not a service name"), std::string::npos);
  EXPECT_EQ(why("/v1/services/chat/a..b/c."), "accepted") << "dots inside a name are fine";
}

TEST(ServiceTarget, HopByHopHeadersAreKnownWhateverTheirCase) {
  for (const char* h : {"Connection", "keep-alive", "TE", "Upgrade", "Proxy-Authorization", "trailer"}) {
    EXPECT_TRUE(IsHopByHop(h)) << h;
  }
  for (const char* h : {"Content-Length", "Transfer-Encoding", "Authorization", "X-Forwarded-For"}) {
    EXPECT_FALSE(IsHopByHop(h)) << h;
  }
}

TEST(ServiceTokens, OnlyTheLatestTokenOpensItsServiceAndOnlyItsHashIsStored) {
  testing::TempDir tmp;
  auto store = Store::Open(tmp / "db");
  ASSERT_TRUE(store.ok()) << store.status();
  ServiceTokens tokens(store->get());
  auto first = tokens.Issue("j-0000000000000001");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 68u);
  EXPECT_EQ(tokens.Lookup(*first), "j-0000000000000001");
  auto other = tokens.Issue("j-0000000000000002");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
  EXPECT_EQ(tokens.Lookup(*other), "j-0000000000000002");
  auto second = tokens.Issue("j-0000000000000001");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(tokens.Lookup(*first), std::nullopt) << "a new token replaces the old";
  EXPECT_EQ(tokens.Lookup(*second), "j-0000000000000001");
  EXPECT_EQ(tokens.Lookup(""), std::nullopt);
  EXPECT_EQ(tokens.Lookup("fgs_" + std::string(64, 'a')), std::nullopt);
  // The store keeps a hash, never the token.
  auto rows = (*store)->ListKv("service-token/");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  for (const auto& [key, value] : *rows) EXPECT_EQ(value.find("fgs_"), std::string::npos) << value;
  // A restarted gateway (a new instance on the same store) honours them.
  ServiceTokens again(store->get());
  EXPECT_EQ(again.Lookup(*second), "j-0000000000000001");
  ASSERT_TRUE(again.Revoke("j-0000000000000001").ok());
  EXPECT_EQ(again.Lookup(*second), std::nullopt);
  EXPECT_EQ(again.Lookup(*other), "j-0000000000000002");
}

}  // namespace
}  // namespace fedgate::gateway
