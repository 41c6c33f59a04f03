#include "gateway/ops/metrics.h"

#include <gtest/gtest.h>

namespace fedgate::gateway {
namespace {

TEST(Metrics, RendersPrometheusTextWithEscapedLabels) {
  Metrics m;
  m.Describe("x_total", "counter", "Things.");
  m.Inc("x_total", {{"reason", "a\"b"}});
  m.Inc("x_total", {{"reason", "a\"b"}}, 2);
  m.Set("g", {}, 1.5);
  int hooks = 0;
  m.OnScrape([&](Metrics& self) { self.Set("scraped", {}, ++hooks); });
  const std::string text = m.Render();
  EXPECT_NE(text.find("# HELP x_total Things.\n# TYPE x_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("x_total{reason=\"a\\\"b\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("g 1.5\n"), std::string::npos);
  EXPECT_NE(text.find("scraped 1\n"), std::string::npos);
  EXPECT_EQ(m.Get("x_total", {{"reason", "a\"b"}}), 3);
  EXPECT_EQ(m.Get("nope"), 0);
}

}  // namespace
}  // namespace fedgate::gateway
