// Three sites in three network namespaces, each pair joined by its own veth
// pair shaped with tbf to a different rate; a real gateway in each. The probed
// links must match what TCP can carry on each link, and follow a reshape; a
// job whose slice is lost keeps running on a replacement that first receives
// its checkpoint over the shaped links.
// Needs root (CI runs as root); never skipped.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>
#include <map>
#include <sstream>

#include "fedgate/v1/jobs.pb.h"
#include "tests/netns/netns_fixture.h"
#include "tests/support/harness.h"
#include "transport/bandwidth.h"

namespace fedgate::testing {
namespace {

TEST_F(NetnsFederation, ProbedLinksMatchTheShapedRatesAndFollowAReshape) {
  // Everyone sees everyone first.
  ASSERT_TRUE(Eventually(
      [&] {
        for (const char* s : {"a", "b", "c"}) {
          auto r = Fedctl(s, "capacity -o json");
          if (r.exit_code != 0) return false;
          size_t n = 0, pos = 0;
          while ((pos = r.out.find("\"state\":\"up\"", pos)) != std::string::npos) ++n, ++pos;
          if (n != 2) return false;
        }
        return true;
      },
      30000, 200))
      << ReadText(dir_ / "site-a/fedgate.log");

  // One probe at a time across the federation, both directions of each pair.
  for (const auto& p : pairs_) {
    ExpectRate(Probe(p.x, p.y), p.mbit, Site(p.x) + " -> " + Site(p.y));
    ExpectRate(Probe(p.y, p.x), p.mbit, Site(p.y) + " -> " + Site(p.x));
  }
  // Every site sees the whole matrix through the ads.
  ASSERT_TRUE(Eventually(
      [&] {
        for (const char* s : {"a", "b", "c"}) {
          if (Matrix(s).size() != 6) return false;
        }
        return true;
      },
      10000, 200));
  auto m = Matrix("c");
  const double ab = m[{"site-a", "site-b"}], ac = m[{"site-a", "site-c"}],
               bc = m[{"site-b", "site-c"}];
  EXPECT_GT(ab, ac);
  EXPECT_GT(ac, bc);
  // Each site has 4 GPUs: a 6-GPU job needs two, and takes the fastest pair.
  EXPECT_EQ(PlanSites(), (std::vector<std::string>{"site-a", "site-b"}));

  // Reshape a-b down to 20 Mbit/s and re-probe: the matrix follows.
  Shape(pairs_[0], 20, "change");
  ExpectRate(Probe("a", "b"), 20, "site-a -> site-b after reshape");
  ExpectRate(Probe("b", "a"), 20, "site-b -> site-a after reshape");
  ASSERT_TRUE(Eventually(
      [&] {
        auto mc = Matrix("c");
        const double now_ab = mc[{"site-a", "site-b"}];
        return now_ab > 0 && now_ab < 0.03;
      },
      10000, 200));
  // The next two-site job avoids the degraded a-b link: a-c (100) beats b-c (40).
  EXPECT_EQ(PlanSites(), (std::vector<std::string>{"site-a", "site-c"}));
}

// A partition: the a-b link of a job running on site-a and site-b goes down
// (ip link set ... down). Both sides mark each other down, b's slice stops
// when its lease lapses, and the job runs again on the sites left (a and c);
// when the link heals the views converge. Every rank logs when it starts and
// stops on which GPU, so that no GPU is seen serving two attempts at once.
TEST_F(NetnsFederation, APartitionedJobRunsAgainOnTheSitesLeftAndTheViewHeals) {
  auto peer_state = [&](const std::string& s, const std::string& peer) {
    auto r = Fedctl(s, "peers list -o json");
    v1::ListPeersResponse resp;
    google::protobuf::util::JsonParseOptions lax;
    lax.ignore_unknown_fields = true;
    if (r.exit_code != 0 || !google::protobuf::util::JsonStringToMessage(r.out, &resp, lax).ok()) {
      return std::string("?");
    }
    for (const auto& p : resp.peers()) {
      if (p.site() == Site(peer)) return v1::Peer::State_Name(p.state());
    }
    return std::string("none");
  };
  auto all_up = [&] {
    for (const auto& p : pairs_) {
      if (peer_state(p.x, p.y) != "up" || peer_state(p.y, p.x) != "up") return false;
    }
    return true;
  };
  ASSERT_TRUE(Eventually(all_up, 30000, 200)) << ReadText(dir_ / "site-a/fedgate.log");
  // Rank output goes to a folder every rank user may write.
  const std::string marks = "/tmp/" + prefix_ + "-marks";
  std::filesystem::create_directories(marks);
  std::filesystem::permissions(marks, std::filesystem::perms::all);
  WriteText(dir_ / "job.yaml",
            "name: split\ngpus: 6\nmax_attempts: 5\ncommand: [sh, -c, 'f=" + marks +
                "/$FEDGATE_SITE-$FEDGATE_ATTEMPT-$RANK; echo \"$FEDGATE_SITE $CUDA_VISIBLE_DEVICES "
                "$FEDGATE_ATTEMPT start $(date +%s.%N)\" > $f; trap \"echo \\\"$FEDGATE_SITE "
                "$CUDA_VISIBLE_DEVICES $FEDGATE_ATTEMPT end $(date +%s.%N)\\\" >> $f; exit 0\" TERM; "
                "sleep 300 & wait']\n");
  auto alice = [&](const std::string& args) { return Alice("a", args); };
  auto job = [&](const std::string& id) { return JobAt("a", id); };
  auto sites_of = [](const v1::Job& j) {
    std::set<std::string> out;
    for (const auto& s : j.run().sites()) out.insert(s.site());
    return out;
  };
  auto sub = alice("jobs submit -f " + dir_ / "job.yaml");
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sub.out, &submitted).ok()) << sub.out;
  const std::string id = submitted.job().id();
  // The fastest pair, a-b (400 Mbit/s).
  ASSERT_TRUE(Eventually([&] { return job(id).state() == v1::Job::RUNNING; }, 30000, 200))
      << job(id).reason();
  ASSERT_EQ(sites_of(job(id)), (std::set<std::string>{"site-a", "site-b"}));
  ASSERT_EQ(job(id).attempt(), 1u);

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto cut = Clock::now();
  MustSh("ip -n " + Ns("a") + " link set " + prefix_ + "ab down");
  double detect_a = -1, detect_b = -1, replaced = -1;
  const bool re_placed = Eventually(
      [&] {
        if (detect_a < 0 && peer_state("a", "b") == "down") detect_a = since(cut);
        if (detect_b < 0 && peer_state("b", "a") == "down") detect_b = since(cut);
        const v1::Job j = job(id);
        if (replaced < 0 && j.state() == v1::Job::RUNNING && j.attempt() >= 2) replaced = since(cut);
        return detect_a >= 0 && detect_b >= 0 && replaced >= 0;
      },
      60000, 100);
  std::printf("[ measure ] partition a-b: detected at a %.2f s, at b %.2f s; job running again "
              "(attempt %u on %zu site(s)) %.2f s after the cut\n",
              detect_a, detect_b, job(id).attempt(), sites_of(job(id)).size(), replaced);
  ASSERT_TRUE(re_placed) << job(id).reason() << ReadText(dir_ / "site-a/fedgate.log");
  // The job (site-a + site-b) has a witness (site-c), so it may be taken
  // over; but site-c still hears site-a and refuses site-b's pre-votes, so
  // no majority confirms site-a silent and site-b's slice stops at its
  // short fence (two leases of 3 s). site-a, which heard site-c all along,
  // calls it lost past that, the shims' 0.5 s, the 3 s stop grace and 1 s
  // of skew (10.5 s), and not before.
  EXPECT_LT(replaced, 15.0) << "target: re-placed within 15 s of the cut"
                           << ReadText(dir_ / "site-a/fedgate.log")
                           << ReadText(dir_ / "site-c/fedgate.log");
  EXPECT_GE(replaced, 10.5 - 1.0) << "never before the lost slice's ranks surely stopped";
  EXPECT_EQ(sites_of(job(id)), (std::set<std::string>{"site-a", "site-c"})) << job(id).reason();
  // b stops its slice when the lease lapses: its GPUs come back.
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = Fedctl("b", "capacity -o json");
        return r.out.find("\"site\":\"site-b\"") != std::string::npos &&
               r.out.find("\"free_gpus\":4") != std::string::npos;
      },
      20000, 200))
      << ReadText(dir_ / "site-b/fedgate.log");

  const auto heal = Clock::now();
  MustSh("ip -n " + Ns("a") + " link set " + prefix_ + "ab up");
  ASSERT_TRUE(Eventually(all_up, 30000, 100)) << ReadText(dir_ / "site-a/fedgate.log");
  std::printf("[ measure ] partition healed: every peer up again %.2f s after the link came back\n",
              since(heal));
  (void)alice("jobs cancel " + id);
  ASSERT_TRUE(Eventually([&] { return job(id).state() == v1::Job::CANCELLED; }, 20000, 200));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the ranks log their end

  // No GPU served two attempts at once: per (site, GPU), attempts' [start,
  // end] intervals do not overlap; a rank still running counts to +inf.
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> spans;
  for (const auto& f : std::filesystem::directory_iterator(marks)) {
    std::istringstream in(ReadText(f.path()));
    std::string site, gpu, what;
    unsigned attempt = 0;
    double t = 0, start = -1, end = 1e18;
    while (in >> site >> gpu >> attempt >> what >> t) (what == "start" ? start : end) = t;
    ASSERT_GE(start, 0) << f.path();
    spans[{site, gpu}].push_back({start, end});
  }
  EXPECT_GE(spans.size(), 8u) << "ranks of both attempts logged";
  for (auto& [key, list] : spans) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].first)
          << "GPU " << key.second << " of " << key.first << " served two attempts at once";
    }
  }
  std::filesystem::remove_all(marks);
}

// recovery: replace over shaped links: a checkpoint written at one site of
// a two-site job is copied to the other over a 200 Mbit/s link at the speed
// fedbench measures there (target: at least 0.90 of it); the site without
// rank 0 is killed -9 with its ranks and its slice is replaced on the third
// site, which first receives the checkpoint over its own (100 Mbit/s) link.
TEST_F(NetnsFederation, AReplacedSliceGetsTheNewestCheckpointOverTheShapedLinks) {
  const Pair& ab = pairs_[0];
  Shape(ab, 200, "change");
  ASSERT_TRUE(Eventually(
      [&] { return Fedctl("a", "capacity -o json").out.find("site-c") != std::string::npos; },
      30000, 200));
  // fedbench on the same link, same direction as the copy below (a -> b).
  const double fedbench_gbps = FedbenchGbps(ab, "a", "b");
  ASSERT_GT(fedbench_gbps, 0);

  const std::string marks = "/tmp/" + prefix_ + "-marks";
  std::filesystem::create_directories(marks);
  std::filesystem::permissions(marks, std::filesystem::perms::all);
  constexpr long kBytes = 48L << 20;
  WriteText(dir_ / "job.yaml",
            "name: ckpt\ngpus: 8\nmax_sites: 2\nmin_gpus_per_site: 4\nrecovery: replace\n"
            "checkpoint: {keep: 2}\ncommand: [sh, -c, 'if [ $RANK = 0 ] && [ $FEDGATE_RESTART = 0 ]; "
            "then head -c " + std::to_string(kBytes) + " /dev/urandom > $FEDGATE_CHECKPOINT_DIR/.w && "
            "mv $FEDGATE_CHECKPOINT_DIR/.w $FEDGATE_CHECKPOINT_DIR/step-1; fi; touch " + marks +
            "/$FEDGATE_SITE-$FEDGATE_RESTART-$RANK; exec sleep 600']\n");
  auto alice = [&](const std::string& args) { return Alice("a", args); };
  auto job = [&](const std::string& id) { return JobAt("a", id); };
  auto sub = alice("jobs submit -f " + dir_ / "job.yaml");
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sub.out, &submitted).ok()) << sub.out;
  const std::string id = submitted.job().id();
  ASSERT_TRUE(Eventually([&] { return job(id).state() == v1::Job::RUNNING; }, 30000, 200))
      << job(id).reason();
  const v1::Job running = job(id);
  std::set<std::string> sites;
  for (const auto& s : running.run().sites()) sites.insert(s.site());
  ASSERT_EQ(sites, (std::set<std::string>{"site-a", "site-b"})) << "the fastest pair";
  const std::string writer = running.run().sites(0).site();
  const std::string other = writer == "site-a" ? "site-b" : "site-a";
  auto ckpt = [&](const std::string& site) {
    return WorkRoot() + "/" + site + "/" + id + "/checkpoints/step-1";
  };
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(ckpt(other)); }, 60000, 100))
      << ReadText(dir_ / (writer + "/fedgate.log"));
  EXPECT_EQ(std::filesystem::file_size(ckpt(other)), static_cast<uintmax_t>(kBytes));
  // The copy's duration, as the sending gateway logged it (once the
  // receiver's answer is back: the file is in place a moment before).
  const std::string key = "checkpoint step-1 copied to " + other + " in ";
  std::string log;
  ASSERT_TRUE(Eventually(
      [&] {
        log = ReadText(dir_ / (writer + "/fedgate.log"));
        return log.find(key) != std::string::npos;
      },
      10000, 100))
      << log;
  const auto line = log.find(key);
  const double secs = std::atof(log.c_str() + line + key.size());
  const double copy_gbps = kBytes * 8.0 / secs / 1e9;
  std::printf("[ measure ] checkpoint copy %s -> %s over the 200 Mbit/s link: %.1f MiB in %.2f s "
              "= %.4f Gbit/s; fedbench on the same link %.4f Gbit/s; ratio %.3f (target >= 0.90)\n",
              writer.c_str(), other.c_str(), kBytes / 1048576.0, secs, copy_gbps, fedbench_gbps,
              copy_gbps / fedbench_gbps);
#if defined(__SANITIZE_ADDRESS__)
  // Judged in the release build (0.97 measured); instrumented, the sending
  // gateway's own chunking costs some of the link (0.895 measured once).
  EXPECT_GE(copy_gbps / fedbench_gbps, 0.80);
#else
  EXPECT_GE(copy_gbps / fedbench_gbps, 0.90);
#endif
  // The copy shares the a-b link with site-a's renewals of site-b's slice:
  // the longest a slice went unrenewed, against the lease (3 s here).
  auto metrics = Sh("ip netns exec " + Ns("a") + " /usr/bin/python3 -c \"import urllib.request; "
                    "print(urllib.request.urlopen('http://127.0.0.1:9090/metrics').read().decode())\"");
  const std::string gap_key = "\nfedgate_coordinator_worst_renew_gap_seconds ";
  const auto gap_at = metrics.out.find(gap_key);
  ASSERT_NE(gap_at, std::string::npos) << metrics.out << metrics.err;
  const double gap = std::atof(metrics.out.c_str() + gap_at + gap_key.size());
  std::printf("[ measure ] worst renewal gap at site-a while the copy ran: %.2f s (lease 3 s)\n", gap);
  EXPECT_LT(gap, 1.5) << "a copy must not hold up renewals";

  // site-b goes, with its ranks; site-c takes its slice.
  // (site-a coordinates: losing it is the coordinator takeover's matter.)
  procs_["b"]->Signal(SIGKILL);
  procs_["b"]->Wait(5000);
  for (pid_t p : JobRankPids(id, "site-b")) ::kill(p, SIGKILL);
  const auto cut = std::chrono::steady_clock::now();
  bool left_running = false;
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Job j = job(id);
        left_running = left_running || j.state() != v1::Job::RUNNING;
        return j.run().restart() == 1 && !j.run().has_replacing();
      },
      90000, 200))
      << job(id).reason() << ReadText(dir_ / "site-a/fedgate.log");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  const v1::Job after = job(id);
  std::set<std::string> now;
  for (const auto& s : after.run().sites()) now.insert(s.site());
  EXPECT_EQ(now, (std::set<std::string>{"site-a", "site-c"}));
  EXPECT_EQ(after.attempt(), 1u);
  EXPECT_FALSE(left_running) << "the job left RUNNING during the replacement";
  EXPECT_TRUE(std::filesystem::exists(ckpt("site-c"))) << "the new site got the checkpoint first";
  EXPECT_TRUE(Eventually(
      [&] {
        for (int r = 0; r < 8; ++r) {
          bool found = false;
          for (const char* s : {"site-a", "site-c"}) {
            found = found || std::filesystem::exists(marks + "/" + s + "-1-" + std::to_string(r));
          }
          if (!found) return false;
        }
        return true;
      },
      20000, 100));
  std::printf("[ measure ] site-b killed: world 1 running on site-a + site-c %.2f s later (lease "
              "included, checkpoint copied to site-c over 100 Mbit/s first)\n",
              took);
  (void)alice("jobs cancel " + id);
  EXPECT_TRUE(Eventually([&] { return job(id).state() == v1::Job::CANCELLED; }, 20000, 200));
  EXPECT_TRUE(Eventually([&] { return JobRankPids(id).empty(); }, 20000, 200));
  std::filesystem::remove_all(marks);
}

// Datasets over shaped links: 1 GiB held at site-c; links a-b 1000, a-c
// 400, b-c 100 Mbit/s. A job that fits at the holder lands there; an 8-GPU
// job must span two sites and takes site-a, whose link to the holder is the
// fastest (without the data the a-b pair would win), staging at the speed
// fedbench measures on that link (target: at least 0.90 of it); ranks at
// both sites read identical files.
class NetnsDatasets : public NetnsFederation {
 protected:
  void SetUp() override {
    const std::string src = "/var/tmp/fedgate-test-work/ds-" + std::to_string(getpid() % 100000);
    std::filesystem::create_directories(src + "/shards");
    MustSh("for i in 0 1 2 3; do head -c 268435456 /dev/urandom > " + src + "/shards/part-$i; done");
    MustSh("chmod -R a+rX /var/tmp/fedgate-test-work");
    src_ = src;
    NetnsFederation::SetUp();
  }
  void TearDown() override {
    NetnsFederation::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(src_, ec);
  }
  std::string ExtraYaml(const std::string& s) const override {
    return s == "c" ? "datasets:\n  - {name: big, path: " + src_ + ", version: v1}\n" : "";
  }
  std::string src_;
};

TEST_F(NetnsDatasets, AJobSpanningTwoSitesStagesOverTheFastestLinkToTheHolder) {
  Shape(pairs_[0], 1000, "change");  // a-b
  Shape(pairs_[1], 400, "change");   // a-c
  Shape(pairs_[2], 100, "change");   // b-c
  ASSERT_TRUE(Eventually(
      [&] { return Fedctl("a", "datasets list -o json").out.find("\"site-c\"") != std::string::npos; },
      90000, 500))
      << ReadText(dir_ / "site-c/fedgate.log");
  for (const auto& [from, to] : {std::pair{"a", "b"}, std::pair{"a", "c"}, std::pair{"b", "c"}}) {
    Probe(from, to);
  }
  // fedbench on the link the copy will take, in its direction (c -> a).
  const double fedbench_gbps = FedbenchGbps(pairs_[1], "c", "a");
  ASSERT_GT(fedbench_gbps, 0);

  const std::string marks = "/tmp/" + prefix_ + "-reads";
  std::filesystem::create_directories(marks);
  std::filesystem::permissions(marks, std::filesystem::perms::all);
  auto alice = [&](const std::string& args) { return Alice("a", args); };
  auto job = [&](const std::string& id) { return JobAt("a", id); };
  auto submit = [&](const std::string& spec) {
    WriteText(dir_ / "job.yaml", spec);
    auto sub = alice("jobs submit -f " + dir_ / "job.yaml");
    v1::SubmitJobResponse r;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(sub.out, &r).ok()) << sub.out << sub.err;
    return r.job().id();
  };
  auto sites_of = [](const v1::Job& j) {
    std::set<std::string> s;
    for (const auto& x : j.run().sites()) s.insert(x.site());
    return s;
  };
  // Fits at the holder: lands there.
  const std::string small = submit("name: small\ngpus: 4\ndatasets: [big]\ncommand: [true]\n");
  ASSERT_TRUE(Eventually([&] { return job(small).state() == v1::Job::SUCCEEDED; }, 30000, 200))
      << job(small).reason();
  EXPECT_EQ(sites_of(job(small)), std::set<std::string>{"site-c"});
  // Without the data, 8 GPUs would go to a+b (the fastest pair).
  WriteText(dir_ / "plain.yaml", "name: plain\ngpus: 8\ncommand: [true]\n");
  EXPECT_NE(alice("jobs plan -f " + dir_ / "plain.yaml").out.find("\"sites\":[\"site-a\",\"site-b\"]"),
            std::string::npos);
  const std::string id = submit(
      "name: big\ngpus: 8\ndatasets: [big]\ncommand: [sh, -c, 'cd $FEDGATE_DATASET_DIR_BIG && "
      "sha256sum shards/* > " + marks + "/$FEDGATE_SITE-$RANK']\n");
  ASSERT_TRUE(Eventually([&] { return job(id).state() == v1::Job::SUCCEEDED; }, 240000, 500))
      << job(id).reason() << ReadText(dir_ / "site-a/fedgate.log");
  EXPECT_EQ(sites_of(job(id)), (std::set<std::string>{"site-a", "site-c"}));
  const std::string story = alice("jobs events " + id).out;
  EXPECT_NE(story.find("of big to stage from site-c at "), std::string::npos) << story;
  EXPECT_NE(story.find("every dataset staged"), std::string::npos) << story;
  // Identical files at both sites.
  std::string first;
  int reads = 0;
  for (const auto& e : std::filesystem::directory_iterator(marks)) {
    const std::string text = ReadText(e.path().string());
    if (first.empty()) first = text;
    EXPECT_EQ(text, first) << e.path();
    ++reads;
  }
  EXPECT_EQ(reads, 8);
  // The transfer's speed, as the staging site logged it.
  const std::string log = ReadText(dir_ / "site-a/fedgate.log");
  const std::string key = "dataset big: staged from site-c: ";
  const auto line = log.find(key);
  ASSERT_NE(line, std::string::npos) << log;
  const double bytes = std::atof(log.c_str() + line + key.size());
  const auto in = log.find(" bytes in ", line);
  const double secs = std::atof(log.c_str() + in + 10);
  const double gbps = bytes * 8 / secs / 1e9;
  std::printf("[ measure ] staging site-c -> site-a over the 400 Mbit/s link: %.0f MiB in %.2f s "
              "= %.4f Gbit/s; fedbench on the same link %.4f Gbit/s; ratio %.3f (target >= 0.90)\n",
              bytes / 1048576, secs, gbps, fedbench_gbps, gbps / fedbench_gbps);
#if defined(__SANITIZE_ADDRESS__)
  // The target is judged in the release build: here three instrumented
  // gateways share two cores with the copy (0.93-0.97 measured).
  EXPECT_GE(gbps / fedbench_gbps, 0.80);
#else
  EXPECT_GE(gbps / fedbench_gbps, 0.90);
#endif

  // Two holders now (site-a kept its copy). A job on b and c, coordinated
  // at site-b: b stages from site-a (measured as the 1000 Mbit/s link),
  // which is killed -9 mid-copy; b resumes from site-c, and no rank starts
  // before the copy is whole and checked. The a-b link is cut to 200 Mbit/s
  // (not probed again) so the copy from site-a lasts about 45 s, whatever
  // the machine's speed: the job placed meanwhile has time to run.
  Shape(pairs_[0], 200, "change");  // a-b
  std::filesystem::remove_all(marks);
  std::filesystem::create_directories(marks);
  std::filesystem::permissions(marks, std::filesystem::perms::all);
  auto alice_b = [&](const std::string& args) { return Alice("b", args); };
  ASSERT_TRUE(Eventually(
      [&] {
        return alice_b("datasets list").out.find("\"sites\":[\"site-a\",\"site-c\"]") !=
               std::string::npos;
      },
      20000, 200));
  WriteText(dir_ / "job2.yaml",
            "name: resume\ngpus: 8\nallowed_sites: [site-b, site-c]\ndatasets: [big]\n"
            "command: [sh, -c, 'cd $FEDGATE_DATASET_DIR_BIG && sha256sum shards/* > " + marks +
                "/$FEDGATE_SITE-$RANK']\n");
  auto sub2 = alice_b("jobs submit -f " + dir_ / "job2.yaml");
  v1::SubmitJobResponse r2;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sub2.out, &r2).ok()) << sub2.out << sub2.err;
  const std::string id2 = r2.job().id();
  auto job_b = [&](const std::string& jid) { return JobAt("b", jid); };
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string reason = job_b(id2).reason();
        const auto pct = reason.find(" %");
        return reason.rfind("staging big at site-b", 0) == 0 && pct != std::string::npos &&
               std::atoi(reason.c_str() + reason.rfind(", ", pct) + 2) >= 10;
      },
      60000, 100))
      << job_b(id2).reason();
  EXPECT_TRUE(std::filesystem::is_empty(marks)) << "no rank starts while its data is staged";
  // Placement goes on meanwhile: a job for site-a's free GPUs runs to its end.
  WriteText(dir_ / "job3.yaml", "name: meanwhile\ngpus: 2\nallowed_sites: [site-a]\ncommand: [true]\n");
  auto sub3 = alice_b("jobs submit -f " + dir_ / "job3.yaml");
  v1::SubmitJobResponse r3;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sub3.out, &r3).ok()) << sub3.out << sub3.err;
  const auto meanwhile_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return job_b(r3.job().id()).state() == v1::Job::SUCCEEDED; }, 20000, 100))
      << job_b(r3.job().id()).reason();
  std::printf("[ measure ] a job placed while site-b stages ran to its end in %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - meanwhile_at).count());
  ASSERT_EQ(job_b(id2).state(), v1::Job::RESERVING)
      << "still staging: " << job_b(id2).reason() << ReadText(dir_ / "site-b/fedgate.log");
  procs_["a"]->Signal(SIGKILL);
  procs_["a"]->Wait(5000);
  Shape(pairs_[2], 1000, "change");  // b-c, so the rest comes in seconds
  ASSERT_TRUE(Eventually([&] { return job_b(id2).state() == v1::Job::SUCCEEDED; }, 120000, 500))
      << job_b(id2).reason() << ReadText(dir_ / "site-b/fedgate.log");
  EXPECT_EQ(job_b(id2).attempt(), 1u) << "resumed within the reservation, not a new attempt";
  const std::string blog = ReadText(dir_ / "site-b/fedgate.log");
  EXPECT_NE(blog.find("dataset big: staging from site-a failed"), std::string::npos) << blog;
  EXPECT_NE(blog.find("dataset big: staged from site-c"), std::string::npos) << blog;
  int reads2 = 0;
  for (const auto& e : std::filesystem::directory_iterator(marks)) {
    EXPECT_EQ(ReadText(e.path().string()), first) << e.path();
    ++reads2;
  }
  EXPECT_EQ(reads2, 8);
  std::filesystem::remove_all(marks);
}

}  // namespace
}  // namespace fedgate::testing
