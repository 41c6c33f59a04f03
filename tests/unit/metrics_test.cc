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
  EXPECT_NE(text.find("x_total{reason=\"a\\\"b\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("g 1.5"), std::string::npos);
  EXPECT_NE(text.find("scraped 1"), std::string::npos);
  EXPECT_EQ(m.Get("x_total", {{"reason", "a\"b"}}), 3);
  EXPECT_EQ(m.Get("nope"), 0);
}

TEST(Metrics, HistogramsFamiliesAndRemoval) {
  Metrics m;
  m.Describe("d_seconds", "histogram", "Delays.", {0.1, 1, 10});
  m.Observe("d_seconds", {{"tenant", "t"}}, 0.5);
  m.Observe("d_seconds", {{"tenant", "t"}}, 5);
  std::string text = m.Render();
  EXPECT_NE(text.find("# TYPE d_seconds histogram"), std::string::npos) << text;
  EXPECT_NE(text.find("d_seconds_bucket{tenant=\"t\",le=\"1\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("d_seconds_count{tenant=\"t\"} 2"), std::string::npos) << text;
  EXPECT_EQ(m.Get("d_seconds", {{"tenant", "t"}}), 2);
  // A whole gauge family replaced: the series not given go.
  m.SetFamily("up", {{{{"peer", "a"}}, 1}, {{{"peer", "b"}}, 0}});
  m.SetFamily("up", {{{{"peer", "b"}}, 1}});
  text = m.Render();
  EXPECT_EQ(text.find("peer=\"a\""), std::string::npos) << text;
  EXPECT_EQ(m.Get("up", {{"peer", "b"}}), 1);
  // One series removed, whatever order its labels are named in; counting it
  // again starts from zero.
  m.Inc("e_total", {{"peer", "a"}, {"kind", "x"}});
  m.Inc("e_total", {{"kind", "x"}, {"peer", "a"}});
  EXPECT_EQ(m.Get("e_total", {{"peer", "a"}, {"kind", "x"}}), 2);
  m.Remove("e_total", {{"kind", "x"}, {"peer", "a"}});
  EXPECT_EQ(m.Render().find("e_total{"), std::string::npos);
  m.Inc("e_total", {{"peer", "a"}, {"kind", "x"}});
  EXPECT_EQ(m.Get("e_total", {{"kind", "x"}, {"peer", "a"}}), 1);
  // A counter set from a total kept elsewhere only rises.
  m.Describe("c_total", "counter", "Copied.");
  m.Set("c_total", {}, 5);
  m.Set("c_total", {}, 3);
  EXPECT_EQ(m.Get("c_total"), 5);
  // A described counter reads 0 before its first event; the placeholder
  // goes once a labeled series exists.
  m.Describe("r_total", "counter", "Refusals.");
  EXPECT_NE(m.Render().find("\nr_total 0"), std::string::npos);
  m.Inc("r_total", {{"reason", "role"}});
  text = m.Render();
  EXPECT_EQ(text.find("\nr_total 0"), std::string::npos) << text;
  EXPECT_NE(text.find("r_total{reason=\"role\"} 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace fedgate::gateway
