// The jobs room's metric families, declared once, and what fills them:
// the job store's transactions, the coordinator's reservations and
// renewals, the jobs by state, the heap (SQLite's and malloc's).
#pragma once

namespace fedgate::federation {
class Clock;
}

namespace fedgate::gateway {

class Coordinator;
class JobStore;
class Metrics;

void DescribeJobMetrics(Metrics* metrics);
// Observes the coordinator's and the store's events and sets the gauges at
// every scrape. All three outlive `metrics`' scrapes.
void WireJobMetrics(Metrics* metrics, JobStore* store, Coordinator* coordinator,
                    const federation::Clock* clock);

}  // namespace fedgate::gateway
