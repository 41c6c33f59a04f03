// The coordinator, its participants and the job API in one process, on a
// FakeClock: two sites' real Participants (real rank processes), real
// GatewayCores exchanging real ads, a real job store, and FakeParticipants in
// place of gRPC so that a frozen site's calls wait exactly as long as the
// test says. Each race of the job lifecycle replays deterministically: a
// cancel at every phase, a commit that arrives after its abort, renewals
// while a site is silent.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "federation/inventory.h"
#include "gateway/config/config.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/peering/core.h"
#include "gateway/jobs/job_manager.h"
#include "gateway/store/job_store.h"
#include "gateway/ops/metrics.h"
#include "gateway/jobs/participant.h"
#include "gateway/store/store.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_participants.h"
#include "tests/support/temp_dir.h"

namespace fedgate::testing {
namespace {

using gateway::Identity;
using gateway::Role;

// One site: its config, store, participant and core.
struct Site {
  std::string name;
  TempDir dir;
  gateway::Config config;
  std::unique_ptr<gateway::Store> store;
  std::unique_ptr<gateway::Participant> participant;
  gateway::Metrics metrics;
  std::unique_ptr<gateway::GatewayCore> core;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = MakeSite("site-a", 2, "site-b");
    b_ = MakeSite("site-b", 4, "site-a");
    fakes_.AddSite("site-a", a_->participant.get());
    fakes_.AddSite("site-b", b_->participant.get());
    SyncAds();
    auto js = gateway::JobStore::Open(a_->config.data_dir + "/fedgate.db");
    ASSERT_TRUE(js.ok()) << js.status();
    jobs_store_ = std::move(*js);
    coordinator_ =
        std::make_unique<gateway::Coordinator>(a_->core.get(), jobs_store_.get(), &fakes_);
    manager_ = std::make_unique<gateway::JobManager>(a_->core.get(), jobs_store_.get());
    manager_->SetCoordinator(coordinator_.get());
    alice_ = Identity{"aidc", Role::kUser, "", "vision", "alice"};
  }

  void TearDown() override {
    // Stop every rank this test started (the gateways' shutdown leaves them
    // to their leases).
    for (Site* s : {a_.get(), b_.get()}) {
      for (auto& [id, rec] : AllJobs()) {
        v1::AbortRequest abort;
        abort.mutable_key()->set_job_id(id);
        abort.mutable_key()->set_attempt(rec.attempt);
        v1::RunPlan run;
        run.ParseFromString(rec.run);
        abort.mutable_key()->set_epoch(run.epoch());
        (void)s->participant->Abort("site-a", abort);
      }
      clock_.Advance(10000);  // past the kill grace
      for (int i = 0; i < 50 && Busy(s); ++i) {
        s->participant->Sweep();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  std::unique_ptr<Site> MakeSite(const std::string& name, int gpus, const std::string& peer) {
    auto s = std::make_unique<Site>();
    s->name = name;
    for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) {
      std::ofstream(s->dir / f) << "x";
    }
    const std::string yaml =
        "site: " + name + "\nfederation: aidc\nlisten: {grpc: 127.0.0.1:1}\n" +
        "tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\ndata_dir: data\n" +
        "inventory:\n  nodes:\n    - {name: " + name + "-n1, address: 127.0.0.1, " +
        "gpu_model: A100-80GB, gpus: " + std::to_string(gpus) + "}\n" +
        "peers:\n  - {site: " + peer + ", endpoint: 127.0.0.1:2}\n" +
        "jobs: {lease: 8s}\nexecutor: {work_dir: work}\n";
    auto cfg = gateway::ParseConfig(yaml, s->dir.path(), "fedgate.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    s->config = *cfg;
    std::filesystem::create_directories(s->config.data_dir);
    auto store = gateway::Store::Open(s->config.data_dir);
    EXPECT_TRUE(store.ok()) << store.status();
    s->store = std::move(*store);
    s->participant = std::make_unique<gateway::Participant>(s->config, &clock_, s->store.get());
    s->core = std::make_unique<gateway::GatewayCore>(
        s->config, &clock_, s->store.get(),
        std::make_unique<federation::StaticInventory>(s->config.nodes), &s->metrics);
    EXPECT_TRUE(s->core->Init().ok());
    s->core->SetFreeGpusFn([p = s->participant.get()] { return p->FreeGpus(); });
    return s;
  }

  // Each site issues a fresh ad of its free GPUs and the other takes it.
  void SyncAds() {
    for (auto [from, to] : {std::pair{a_.get(), b_.get()}, std::pair{b_.get(), a_.get()}}) {
      ASSERT_TRUE(from->core->Tick().ok());
      v1::AdvertiseRequest req;
      req.set_site(from->name);
      for (auto& stored : from->core->Pending(to->name, {})) *req.add_ads() = std::move(stored.ad);
      auto got = to->core->Advertise(Identity{"aidc", Role::kGateway, from->name, "", ""}, req);
      ASSERT_TRUE(got.ok()) << got.status();
    }
  }

  std::string Submit(int gpus, const std::string& script) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("t");
    req.mutable_spec()->set_gpus(gpus);
    for (const char* a : {"sh", "-c"}) req.mutable_spec()->add_command(a);
    req.mutable_spec()->add_command(script);
    req.mutable_spec()->add_command(markers_.path());
    auto out = manager_->Submit(alice_, req);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->job().id() : "";
  }

  gateway::JobRecord Job(const std::string& id) {
    auto r = jobs_store_->Get(id);
    EXPECT_TRUE(r.ok() && r->has_value()) << r.status();
    return r.ok() && r->has_value() ? **r : gateway::JobRecord{};
  }

  absl::Status Cancel(const std::string& id) {
    v1::CancelJobRequest req;
    req.set_id(id);
    return manager_->Cancel(alice_, req).status();
  }

  std::map<std::string, gateway::JobRecord> AllJobs() {
    std::map<std::string, gateway::JobRecord> out;
    auto rows = jobs_store_->List("", "", "", 1000);
    if (rows.ok()) {
      for (auto& r : *rows) out[r.id] = r;
    }
    return out;
  }

  static bool Busy(Site* s) {
    for (const auto& [node, free] : s->participant->FreeGpus()) {
      for (const auto& n : s->config.nodes) {
        if (n.name == node && free != n.gpus) return true;
      }
    }
    return false;
  }

  // Sweeps `s` until its GPUs are all free (ranks exit in real time).
  bool SweepUntilFree(Site* s) {
    for (int i = 0; i < 250; ++i) {
      s->participant->Sweep();
      if (!Busy(s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  bool Marker(const std::string& site) { return std::filesystem::exists(markers_ / site); }

  FakeClock clock_;
  TempDir markers_;
  std::unique_ptr<Site> a_, b_;
  FakeParticipants fakes_{"site-a"};
  std::unique_ptr<gateway::JobStore> jobs_store_;
  std::unique_ptr<gateway::Coordinator> coordinator_;
  std::unique_ptr<gateway::JobManager> manager_;
  Identity alice_;
};

// Each rank touches a marker named after its site, then sleeps.
constexpr const char* kTouchAndSleep = "touch \"$0/$FEDGATE_SITE\"; exec sleep 30";

TEST_F(CoordinatorTest, AJobSpanningTwoSitesRunsOnBoth) {
  const std::string id = Submit(6, kTouchAndSleep);
  coordinator_->PlacePass();
  const auto job = Job(id);
  EXPECT_EQ(job.state, federation::JobState::kRunning) << job.reason;
  EXPECT_EQ(fakes_.Delivered("Commit", "site-a"), 1);
  EXPECT_EQ(fakes_.Delivered("Commit", "site-b"), 1);
  EXPECT_TRUE(Busy(a_.get()));
  EXPECT_TRUE(Busy(b_.get()));
}

TEST_F(CoordinatorTest, CancelWhilePendingSendsNothingToAnySite) {
  const std::string id = Submit(6, kTouchAndSleep);
  ASSERT_TRUE(Cancel(id).ok());
  coordinator_->PlacePass();
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
  EXPECT_EQ(fakes_.Delivered("Prepare", "site-a") + fakes_.Delivered("Prepare", "site-b"), 0);
}

TEST_F(CoordinatorTest, CancelWhileASiteIsFrozenInPrepareStartsNoRank) {
  const std::string id = Submit(6, kTouchAndSleep);
  fakes_.Freeze("site-b");
  std::thread place([&] { coordinator_->PlacePass(); });
  ASSERT_TRUE(fakes_.WaitForQueued("site-b", 1)) << "Prepare never reached the frozen site";
  EXPECT_EQ(Job(id).state, federation::JobState::kReserving);
  EXPECT_TRUE(fakes_.WaitForDelivered("Prepare", "site-a", 1));

  ASSERT_TRUE(Cancel(id).ok());
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
  // The frozen Prepare lands after the cancel; the coordinator loses its
  // compare-and-set and must commit nothing anywhere.
  fakes_.Thaw("site-b");
  place.join();
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
  EXPECT_EQ(fakes_.Delivered("Commit", "site-a"), 0);
  EXPECT_EQ(fakes_.Delivered("Commit", "site-b"), 0);
  EXPECT_GE(fakes_.Delivered("Abort", "site-b"), 1) << "the late hold at site-b is never released";
  EXPECT_TRUE(SweepUntilFree(a_.get()));
  EXPECT_TRUE(SweepUntilFree(b_.get()));
  EXPECT_FALSE(Marker("site-a"));
  EXPECT_FALSE(Marker("site-b"));
  // Later passes leave it cancelled.
  coordinator_->PlacePass();
  coordinator_->RenewPass();
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
}

TEST_F(CoordinatorTest, ACommitThatArrivesAfterItsAbortStartsNoRank) {
  const std::string id = Submit(6, kTouchAndSleep);
  fakes_.Freeze("site-b", "Commit");
  std::thread place([&] { coordinator_->PlacePass(); });
  ASSERT_TRUE(fakes_.WaitForQueued("site-b", 1));
  // The decision is durable and site-a runs; site-b's commit is in flight.
  EXPECT_EQ(Job(id).state, federation::JobState::kRunning);
  ASSERT_TRUE(Cancel(id).ok());
  EXPECT_GE(fakes_.Delivered("Abort", "site-b"), 1);
  fakes_.Thaw("site-b");  // the commit arrives after the abort
  place.join();
  EXPECT_EQ(fakes_.Delivered("Commit", "site-b"), 1);
  EXPECT_TRUE(SweepUntilFree(b_.get()));
  EXPECT_FALSE(Marker("site-b")) << "site-b started a rank of a cancelled job";
  EXPECT_TRUE(SweepUntilFree(a_.get())) << "site-a's ranks were not stopped";
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
}

TEST_F(CoordinatorTest, CancelWhileRunningStopsEveryRankAndFreesTheGpus) {
  const std::string id = Submit(6, kTouchAndSleep);
  coordinator_->PlacePass();
  ASSERT_EQ(Job(id).state, federation::JobState::kRunning);
  // Both ranks' markers appear once the processes run.
  for (int i = 0; i < 250 && !(Marker("site-a") && Marker("site-b")); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(Marker("site-a") && Marker("site-b"));
  ASSERT_TRUE(Cancel(id).ok());
  // The GPUs stay used until the ranks have exited (SIGTERM; sleep obeys).
  EXPECT_TRUE(Busy(a_.get()));
  EXPECT_TRUE(SweepUntilFree(a_.get()));
  EXPECT_TRUE(SweepUntilFree(b_.get()));
  coordinator_->RenewPass();
  EXPECT_EQ(Job(id).state, federation::JobState::kCancelled);
}

TEST_F(CoordinatorTest, AFrozenSiteDoesNotDelayRenewalsElsewhere) {
  const std::string on_a = Submit(2, kTouchAndSleep);  // fits site-a alone
  coordinator_->PlacePass();
  const std::string on_b = Submit(4, kTouchAndSleep);  // site-a is full: site-b
  SyncAds();
  coordinator_->PlacePass();
  ASSERT_EQ(Job(on_a).state, federation::JobState::kRunning);
  ASSERT_EQ(Job(on_b).state, federation::JobState::kRunning) << Job(on_b).reason;
  v1::RunPlan run;
  run.ParseFromString(Job(on_b).run);
  ASSERT_EQ(run.sites(0).site(), "site-b");

  fakes_.Freeze("site-b");
  const int before = fakes_.Delivered("SliceStatus", "site-a");
  std::thread renew([&] { coordinator_->RenewPass(); });
  ASSERT_TRUE(fakes_.WaitForQueued("site-b", 1));
  // site-a is renewed while site-b's call still waits.
  EXPECT_TRUE(fakes_.WaitForDelivered("SliceStatus", "site-a", before + 1));
  // Then site-b is asked again, as on_a's witness: both calls wait.
  ASSERT_TRUE(fakes_.WaitForQueued("site-b", 2));
  fakes_.Expire("site-b");
  renew.join();
  // Most of a lease later, site-a's slice still runs: its renewal counted.
  clock_.Advance(coordinator_->lease_ms() * 3 / 4);
  a_->participant->Sweep();
  v1::SliceStatusRequest st;
  st.mutable_key()->set_job_id(on_a);
  st.mutable_key()->set_attempt(1);
  v1::RunPlan run_a;
  run_a.ParseFromString(Job(on_a).run);
  st.mutable_key()->set_epoch(run_a.epoch());
  auto status = a_->participant->Status("site-a", st);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::SliceStatusResponse::RUNNING) << status->message();
  fakes_.Thaw("site-b");
}

TEST_F(CoordinatorTest, ASilentCoordinatorsSliceStopsWhenItsLeaseLapses) {
  const std::string id = Submit(2, kTouchAndSleep);
  coordinator_->PlacePass();
  ASSERT_EQ(Job(id).state, federation::JobState::kRunning);
  ASSERT_TRUE(Busy(a_.get()));
  clock_.Advance(coordinator_->lease_ms() + 1);  // no renewal in between
  a_->participant->Sweep();
  EXPECT_TRUE(SweepUntilFree(a_.get())) << "the slice outlived its lease";
}

// A world of fewer than three members names the peers that are up as its
// witnesses; a peer gone silent is not named.
TEST_F(CoordinatorTest, AWorldOfFewerThanThreeMembersNamesAnUpPeerAsWitness) {
  const std::string id = Submit(2, kTouchAndSleep);
  coordinator_->PlacePass();
  v1::RunPlan run;
  ASSERT_TRUE(run.ParseFromString(Job(id).run));
  ASSERT_EQ(run.sites_size(), 1);
  EXPECT_EQ(run.sites(0).site(), "site-a");
  EXPECT_EQ(std::vector<std::string>(run.witnesses().begin(), run.witnesses().end()),
            std::vector<std::string>{"site-b"});
  ASSERT_TRUE(Cancel(id).ok());
  ASSERT_TRUE(SweepUntilFree(a_.get()));
  // site-b silent past its down time: the next world names nobody.
  clock_.Advance(federation::kMissedIntervalsForDown * a_->config.advertise.interval_ms + 1);
  ASSERT_TRUE(a_->core->Tick().ok());
  ASSERT_TRUE(a_->core->DownPeers().contains("site-b"));
  const std::string next = Submit(2, kTouchAndSleep);
  coordinator_->PlacePass();
  ASSERT_EQ(Job(next).state, federation::JobState::kRunning) << Job(next).reason;
  ASSERT_TRUE(run.ParseFromString(Job(next).run));
  EXPECT_EQ(run.witnesses_size(), 0) << "site-b is down";
}

TEST_F(CoordinatorTest, OnlyTheCoordinatorMayCallAParticipantAboutItsJob) {
  const std::string id = Submit(6, kTouchAndSleep);
  coordinator_->PlacePass();
  ASSERT_EQ(Job(id).state, federation::JobState::kRunning);
  v1::RunPlan run;
  run.ParseFromString(Job(id).run);
  v1::ReservationKey key;
  key.set_job_id(id);
  key.set_attempt(1);
  key.set_epoch(run.epoch());
  gateway::Participant* b = b_->participant.get();
  v1::AbortRequest abort;
  *abort.mutable_key() = key;
  v1::SliceStatusRequest status;
  *status.mutable_key() = key;
  v1::ReadLogRequest log;
  log.set_job_id(id);
  // A well-formed commit, the same as the coordinator's.
  v1::CommitRequest commit;
  *commit.mutable_key() = key;
  for (const auto& site : run.sites()) {
    if (site.site() == "site-b") *commit.mutable_ranks() = site.ranks();
  }
  commit.set_world_size(run.world_size());
  commit.set_master_addr(run.master_addr());
  commit.set_master_port(run.master_port());
  commit.add_command("true");
  commit.set_lease_ms(coordinator_->lease_ms());
  v1::PrepareRequest prepare;
  *prepare.mutable_key() = key;
  prepare.add_nodes()->set_node("site-b-n1");
  prepare.mutable_nodes(0)->set_gpus(1);
  prepare.set_hold_ttl_ms(1000);
  EXPECT_TRUE(absl::IsPermissionDenied(b->Abort("site-c", abort).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(b->Status("site-c", status).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(b->ReadLog("site-c", log).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(b->Commit("site-c", commit).status()))
      << b->Commit("site-c", commit).status();
  EXPECT_TRUE(absl::IsPermissionDenied(b->Prepare("site-c", prepare).status()));
  // ... and the slice runs on.
  auto still = b->Status("site-a", status);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->state(), v1::SliceStatusResponse::RUNNING);
}

// Finished slices and their holds are pruned (state stays bounded), yet the
// job's logs stay readable by its coordinator only.
TEST_F(CoordinatorTest, LogsStayOwnedAfterTheirSliceIsForgotten) {
  const std::string id = Submit(2, "echo hello from $FEDGATE_SITE");
  coordinator_->PlacePass();
  ASSERT_EQ(Job(id).state, federation::JobState::kRunning);
  ASSERT_TRUE(SweepUntilFree(a_.get()));
  v1::RunPlan run;
  run.ParseFromString(Job(id).run);
  v1::SliceStatusRequest status;
  status.mutable_key()->set_job_id(id);
  status.mutable_key()->set_attempt(1);
  status.mutable_key()->set_epoch(run.epoch());
  auto ended = a_->participant->Status("site-a", status);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->state(), v1::SliceStatusResponse::SUCCEEDED);
  clock_.Advance(11 * 60 * 1000);  // past the finished-slice window
  a_->participant->Sweep();
  auto gone = a_->participant->Status("site-a", status);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->state(), v1::SliceStatusResponse::UNKNOWN) << "the finished slice was kept";
  v1::ReadLogRequest log;
  log.set_job_id(id);
  log.set_rank(1);
  auto other = a_->participant->ReadLog("site-c", log);
  EXPECT_TRUE(absl::IsPermissionDenied(other.status())) << other.status();
  auto mine = a_->participant->ReadLog("site-a", log);  // attempt 0: the latest
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->content(), "hello from site-a\n");
}

// Past the cap, the oldest finished slices whose coordinator has seen their
// end are forgotten; one it never asked about is kept (a coordinator that
// restarts must not find a finished job lost).
TEST_F(CoordinatorTest, OnlyReportedFinishedSlicesCountAgainstTheCap) {
  gateway::Participant p(a_->config, &clock_, nullptr, /*max_finished=*/2);
  auto key = [](int i) {
    v1::ReservationKey k;
    k.set_job_id("j-00000000000000a" + std::to_string(i));
    k.set_attempt(1);
    k.set_epoch(10 + i);
    return k;
  };
  for (int i = 0; i < 4; ++i) {
    v1::PrepareRequest prepare;
    *prepare.mutable_key() = key(i);
    prepare.set_tenant("vision");
    prepare.add_nodes()->set_node("site-a-n1");
    prepare.mutable_nodes(0)->set_gpus(1);
    prepare.set_hold_ttl_ms(5000);
    ASSERT_TRUE(p.Prepare("site-a", prepare).ok());
    v1::CommitRequest commit;
    *commit.mutable_key() = key(i);
    auto* r = commit.add_ranks();
    r->set_local_world_size(1);
    r->set_node("site-a-n1");
    commit.set_world_size(1);
    commit.set_master_addr("127.0.0.1");
    commit.set_master_port(29500);
    commit.add_command("true");
    commit.set_lease_ms(8000);
    ASSERT_TRUE(p.Commit("site-a", commit).ok());
    // One at a time, so that they end in order.
    for (int t = 0; t < 250 && p.FreeGpus()["site-a-n1"] != 2; ++t) {
      p.Sweep();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(p.FreeGpus()["site-a-n1"], 2u);
    clock_.Advance(1000);
  }
  auto status = [&](int i) {
    v1::SliceStatusRequest req;
    *req.mutable_key() = key(i);
    auto st = p.Status("site-a", req);
    return st.ok() ? st->state() : v1::SliceStatusResponse::STATE_UNSPECIFIED;
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(status(i), v1::SliceStatusResponse::SUCCEEDED);
  p.Sweep();  // three reported, cap two: the oldest reported goes
  EXPECT_EQ(status(0), v1::SliceStatusResponse::UNKNOWN);
  EXPECT_EQ(status(1), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(status(2), v1::SliceStatusResponse::SUCCEEDED);
  EXPECT_EQ(status(3), v1::SliceStatusResponse::SUCCEEDED) << "never reported, yet forgotten";
}

TEST_F(CoordinatorTest, AHoldNeverCommittedExpiresOnTheFakeClock) {
  v1::PrepareRequest prepare;
  prepare.mutable_key()->set_job_id("j-00000000000000aa");
  prepare.mutable_key()->set_attempt(1);
  prepare.mutable_key()->set_epoch(7);
  prepare.set_tenant("vision");
  prepare.add_nodes()->set_node("site-b-n1");
  prepare.mutable_nodes(0)->set_gpus(3);
  prepare.set_hold_ttl_ms(5000);
  auto held = b_->participant->Prepare("site-a", prepare);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(b_->participant->FreeGpus()["site-b-n1"], 1u);
  clock_.Advance(4999);
  b_->participant->Sweep();
  EXPECT_EQ(b_->participant->FreeGpus()["site-b-n1"], 1u);
  clock_.Advance(2);
  b_->participant->Sweep();
  EXPECT_EQ(b_->participant->FreeGpus()["site-b-n1"], 4u);
}

}  // namespace
}  // namespace fedgate::testing
