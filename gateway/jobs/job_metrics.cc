#include "gateway/jobs/job_metrics.h"

#include <malloc.h>
#include <sqlite3.h>

#include <algorithm>

#include "federation/clock.h"
#include "gateway/jobs/coordinator.h"
#include "gateway/ops/metrics.h"
#include "gateway/store/job_store.h"

namespace fedgate::gateway {

void DescribeJobMetrics(Metrics* metrics) {
  metrics->Describe("fedgate_job_store_commits_total", "counter",
                       "Transactions (fsyncs) of the job store's writer.");
  metrics->Describe("fedgate_job_store_largest_batch", "gauge",
                       "Most writes one job-store transaction carried.");
  metrics->Describe("fedgate_coordinator_renew_passes_total", "counter",
                       "Passes of the coordinator's lease renewal over every running job.");
  metrics->Describe("fedgate_coordinator_worst_renew_gap_seconds", "gauge",
                       "Longest time a slice on an answering site went without a renewal "
                       "(compare with fedgate_coordinator_lease_seconds).");
  metrics->Describe("fedgate_coordinator_lease_seconds", "gauge",
                       "The lease of committed slices.");
  metrics->Describe("fedgate_sqlite_memory_bytes", "gauge",
                       "Heap held by SQLite (page caches of every connection).");
  metrics->Describe("fedgate_heap_bytes", "gauge",
                       "glibc malloc's heap: bytes in use, and bytes free but still held "
                       "(kept between live blocks, so not given back to the system); zeros "
                       "under another allocator (AddressSanitizer, tcmalloc).");
  metrics->Describe("fedgate_jobs", "gauge", "Jobs coordinated here, by state.");
  metrics->Describe("fedgate_job_scheduling_delay_seconds", "histogram",
                       "Wait from submit to RUNNING, per attempt, by tenant and priority.",
                       {1, 5, 15, 60, 300, 900, 3600, 4 * 3600});
  metrics->Describe("fedgate_job_store_commit_seconds", "histogram",
                       "Duration of one job-store transaction (fsync included).",
                       {0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5});
  metrics->Describe("fedgate_job_gpus", "gauge",
                       "GPUs asked by jobs coordinated here that have not ended, by state "
                       "(PENDING, RESERVING, RUNNING), tenant and priority.");
  metrics->Describe("fedgate_reservation_phase_seconds", "histogram",
                       "Duration of a two-phase reservation's phases (prepare on every site at "
                       "once, commit on every site at once), by result.",
                       {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  metrics->Describe("fedgate_reservations_total", "counter",
                       "Reservations that ended committed or aborted (a site refused or failed, "
                       "or the job ended meanwhile).");
  metrics->Describe("fedgate_job_store_batch_size", "histogram",
                       "Writes carried by one job-store transaction (group commit).",
                       {1, 2, 4, 8, 16, 32, 64, 128});
  metrics->Describe("fedgate_job_oldest_pending_seconds", "gauge",
                       "Age of the oldest PENDING job (0 when none waits).");
  metrics->Describe("fedgate_job_coordination_moves_total", "counter",
                       "Coordinator takeovers since start: jobs this site took over "
                       "(direction=\"in\") and jobs taken over from it (direction=\"out\").");
}

void WireJobMetrics(Metrics* metrics, JobStore* store, Coordinator* coordinator,
                    const federation::Clock* clock) {
  coordinator->SetOnReservation([m = metrics](const char* phase, bool ok, double s) {
    if (phase[0] == 'p' || phase[0] == 'c') {
      m->Observe("fedgate_reservation_phase_seconds",
                 {{"phase", phase}, {"result", ok ? "ok" : "failed"}}, s);
    }
  });
  coordinator->SetOnReservationEnd([m = metrics](bool committed) {
    m->Inc("fedgate_reservations_total", {{"result", committed ? "committed" : "aborted"}});
  });
  coordinator->SetOnScheduled([m = metrics](double s, const JobRecord& j) {
    m->Observe("fedgate_job_scheduling_delay_seconds",
               {{"tenant", j.tenant}, {"priority", j.spec.priority()}}, s);
  });
  store->SetOnCommit([m = metrics](double s, size_t batch) {
    m->Observe("fedgate_job_store_commit_seconds", {}, s);
    m->Observe("fedgate_job_store_batch_size", {}, static_cast<double>(batch));
  });
  metrics->OnScrape([js = store, c = coordinator,
                      clock = clock](Metrics& m) {
    m.Set("fedgate_job_store_commits_total", {}, static_cast<double>(js->commits()));
    m.Set("fedgate_job_store_largest_batch", {}, static_cast<double>(js->largest_batch()));
    m.Set("fedgate_coordinator_renew_passes_total", {}, static_cast<double>(c->renew_passes()));
    m.Set("fedgate_coordinator_worst_renew_gap_seconds", {}, c->worst_renew_gap_ms() / 1000.0);
    m.Set("fedgate_coordinator_lease_seconds", {}, c->lease_ms() / 1000.0);
    m.SetFamily("fedgate_job_coordination_moves_total",
                {{{{"direction", "in"}}, static_cast<double>(c->takeovers())},
                 {{{"direction", "out"}}, static_cast<double>(c->stepped_down())}});
    m.Set("fedgate_sqlite_memory_bytes", {}, static_cast<double>(sqlite3_memory_used()));
    const struct mallinfo2 heap = mallinfo2();  // every arena, mmapped blocks included
    m.SetFamily("fedgate_heap_bytes",
                {{{{"kind", "in_use"}}, static_cast<double>(heap.uordblks + heap.hblkhd)},
                 {{{"kind", "free"}}, static_cast<double>(heap.fordblks)}});
    if (auto counts = js->Count(); counts.ok()) {
      std::vector<std::pair<Labels, double>> by_state;
      for (const auto& [state, n] : counts->by_state) {
        by_state.push_back({{{"state", state}}, static_cast<double>(n)});
      }
      m.SetFamily("fedgate_jobs", by_state);
      std::vector<std::pair<Labels, double>> gpus;
      for (const auto& [key, n] : counts->active_gpus) {
        const auto& [state, tenant, priority] = key;
        gpus.push_back({{{"state", state}, {"tenant", tenant}, {"priority", priority}},
                        static_cast<double>(n)});
      }
      m.SetFamily("fedgate_job_gpus", gpus);
      const int64_t now = clock->NowMs();
      m.Set("fedgate_job_oldest_pending_seconds", {},
            counts->oldest_pending_created_ms
                ? std::max<int64_t>(0, now - *counts->oldest_pending_created_ms) / 1000.0
                : 0.0);
    }
  });
}

}  // namespace fedgate::gateway
