// Datasets in placement: names that are safe as file names, sizes the config
// writes, the staging time a site would need, and preferred_sites.
#include "federation/dataset.h"

#include <gtest/gtest.h>

#include <map>

#include "federation/job_spec.h"
#include "federation/placement.h"

namespace fedgate::federation {
namespace {

TEST(Dataset, NamesAreSafeFileNames) {
  for (const char* ok : {"imagenet-1k", "c4.en", "A_b-9", "x"}) {
    EXPECT_TRUE(IsValidDatasetName(ok)) << ok;
  }
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "-x", ".hidden", "a b", "a\\b"}) {
    EXPECT_FALSE(IsValidDatasetName(bad)) << bad;
  }
  EXPECT_FALSE(IsValidDatasetName(std::string(101, 'a')));
  EXPECT_EQ(DatasetEnvName("imagenet-1k"), "FEDGATE_DATASET_DIR_IMAGENET_1K");
  EXPECT_EQ(DatasetEnvName("c4.en"), "FEDGATE_DATASET_DIR_C4_EN");
}

TEST(Dataset, ByteSizesAndHumanForms) {
  EXPECT_EQ(ParseByteSize("2TB"), 2'000'000'000'000ULL);
  EXPECT_EQ(ParseByteSize("64MiB"), 64ULL << 20);
  EXPECT_EQ(ParseByteSize("1048576"), 1048576ULL);
  EXPECT_EQ(ParseByteSize("5B"), 5ULL);
  for (const char* bad : {"", "TB", "2 TB", "2tb", "-1GB", "1.5GB", "99999999999999999999"}) {
    EXPECT_FALSE(ParseByteSize(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ParseByteSize("20000000TiB").has_value()) << "overflow";
  EXPECT_EQ(HumanBytes(1'200'000'000'000ULL), "1.2 TB");
  EXPECT_EQ(HumanBytes(512), "512 B");
  // 1.2 TB at 9.6 Gbit/s: 1000 s, the "~17 min".
  EXPECT_DOUBLE_EQ(StagingSeconds(1'200'000'000'000ULL, 9.6), 1000.0);
  EXPECT_EQ(HumanSeconds(1000), "~17 min");
}

TEST(Dataset, JobSpecRefusesNamesThatAreNotPlain) {
  v1::JobSpec spec;
  spec.set_gpus(1);
  spec.add_command("true");
  spec.add_datasets("imagenet-1k");
  EXPECT_TRUE(ValidateJobSpec(spec, {}).ok());
  for (const char* bad : {"../../etc", "a/b", ""}) {
    v1::JobSpec s = spec;
    s.add_datasets(bad);
    const auto st = ValidateJobSpec(s, {});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("not a dataset name"), std::string::npos) << st;
  }
  spec.add_datasets("imagenet-1k");
  EXPECT_NE(ValidateJobSpec(spec, {}).message().find("named twice"), std::string::npos);
  v1::JobSpec pref = spec;
  pref.clear_datasets();
  pref.add_preferred_sites("Not_A_Site");
  EXPECT_EQ(ValidateJobSpec(pref, {}).code(), absl::StatusCode::kInvalidArgument);
}

// Three sites of 4 GPUs; `holder` holds a 1.2 TB dataset; links as given.
struct World {
  std::vector<SiteOffer> offers;
  std::map<std::pair<std::string, std::string>, double> gbps;
  PairGbps Links() {
    return [this](const std::string& a, const std::string& b) -> std::optional<double> {
      auto it = gbps.find({std::min(a, b), std::max(a, b)});
      if (it == gbps.end()) return std::nullopt;
      return it->second;
    };
  }
};

World ThreeSites() {
  World w;
  for (const char* s : {"a", "b", "c"}) {
    w.offers.push_back({s, true, {{std::string(s) + "1", "H100", 80, 4}}, {}});
  }
  w.offers[0].datasets["big"] = 1'200'000'000'000ULL;  // a holds it
  return w;
}

TEST(Dataset, AJobThatFitsAtTheHolderLandsThere) {
  World w = ThreeSites();
  JobRequest job;
  job.gpus = 4;
  job.datasets = {"big"};
  // b would fit as well, and by name c or b could win a tie: the data decides.
  w.offers[0].nodes[0].free_gpus = 4;
  auto r = Place(job, w.offers, w.Links());
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites, std::vector<std::string>{"a"});
  EXPECT_EQ(r.placement->staging_seconds, 0);
  EXPECT_NE(r.summary.find("datasets already there"), std::string::npos) << r.summary;
}

TEST(Dataset, ASpanningJobPicksTheSiteWithTheFastestLinkToTheHolder) {
  World w = ThreeSites();
  // b-c is the fastest pair, but neither holds the data; a-c beats a-b.
  w.gbps = {{{"a", "b"}, 1.0}, {{"a", "c"}, 9.6}, {{"b", "c"}, 40.0}};
  JobRequest job;
  job.gpus = 8;
  job.datasets = {"big"};
  auto r = Place(job, w.offers, w.Links());
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"a", "c"}));
  EXPECT_DOUBLE_EQ(r.placement->staging_seconds, 1000.0);
  std::map<std::string, SiteExplanation> e;
  for (const auto& x : r.explanation) e[x.site] = x;
  EXPECT_NE(e["c"].reason.find("1.2 TB of big to stage from a at 9.6 Gbit/s, ~17 min"),
            std::string::npos)
      << e["c"].reason;
  EXPECT_NE(e["b"].reason.find("at 1.0 Gbit/s"), std::string::npos) << e["b"].reason;
  // Without datasets the bottleneck link alone picks b and c.
  job.datasets.clear();
  r = Place(job, w.offers, w.Links());
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"b", "c"}));
}

TEST(Dataset, AnUnmeasuredLinkCountsAsTheSlowestMeasured) {
  World w = ThreeSites();
  w.gbps = {{{"a", "b"}, 2.0}};  // a-c unknown
  JobRequest job;
  job.gpus = 8;
  job.datasets = {"big"};
  auto r = Place(job, w.offers, w.Links());
  ASSERT_TRUE(r.placement) << "feasible, not refused";
  std::map<std::string, SiteExplanation> e;
  for (const auto& x : r.explanation) e[x.site] = x;
  // c is ranked as if at 2 Gbit/s: a tie with b, broken by the bottleneck
  // link (a-b measured) then by name.
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(e["c"].reason.find("link not measured: the slowest measured"), std::string::npos)
      << e["c"].reason;
}

TEST(Dataset, NoHolderMeansNotPlaceableWithTheReason) {
  World w = ThreeSites();
  w.offers[0].up = false;  // the only holder is down
  JobRequest job;
  job.gpus = 4;
  job.datasets = {"big"};
  auto r = Place(job, w.offers, w.Links());
  EXPECT_FALSE(r.placement);
  EXPECT_NE(r.summary.find("no site up holds dataset big"), std::string::npos) << r.summary;
}

TEST(Dataset, PreferredSitesWinWhenTheyFitAndSaySo) {
  World w = ThreeSites();
  w.gbps = {{{"a", "b"}, 1.0}, {{"a", "c"}, 9.6}, {{"b", "c"}, 40.0}};
  JobRequest job;
  job.gpus = 4;
  job.preferred_sites = {"c", "b"};
  auto r = Place(job, w.offers, w.Links());
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites, std::vector<std::string>{"c"}) << "the first preferred fits";
  EXPECT_NE(r.summary.find("preferred_sites won: [c]"), std::string::npos) << r.summary;
  job.gpus = 8;  // c alone is too small: c and b, before the objective's a-c
  r = Place(job, w.offers, w.Links());
  EXPECT_EQ(r.placement->sites, (std::vector<std::string>{"b", "c"}));
  std::map<std::string, SiteExplanation> e;
  for (const auto& x : r.explanation) e[x.site] = x;
  EXPECT_NE(e["a"].reason.find("not needed: preferred_sites [c, b] fit the job"),
            std::string::npos)
      << e["a"].reason;
  job.gpus = 12;  // more than both: every site, by the objective
  r = Place(job, w.offers, w.Links());
  ASSERT_TRUE(r.placement);
  EXPECT_EQ(r.placement->sites.size(), 3u);
  EXPECT_NE(r.summary.find("preferred_sites cannot hold it"), std::string::npos) << r.summary;
  // allowed_sites still binds: a preferred site that is not allowed is skipped.
  job.gpus = 4;
  job.allowed_sites = {"a", "b"};
  r = Place(job, w.offers, w.Links());
  EXPECT_EQ(r.placement->sites, std::vector<std::string>{"b"});
}

}  // namespace
}  // namespace fedgate::federation
