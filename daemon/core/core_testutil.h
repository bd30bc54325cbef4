// Shared by the tests of giftd's components: every component of the core
// wired to the others as the Daemon wires them, without the Daemon (no poll
// thread, no peers, no prefix lock, no refresher threads' results unless a
// test takes them), so that a test drives one component and reads the
// others.
//
//   CoreParts core("regtest");
//   ASSERT_OK(core.registrar.Register(Request(0, 1)));
//   EXPECT_EQ(core.planner.epoch(), 1);
//
// Thread safety: test code, one thread (the components' "caller's lock" is
// the test's only thread).
#ifndef GIFT_DAEMON_CORE_CORE_TESTUTIL_H_
#define GIFT_DAEMON_CORE_CORE_TESTUTIL_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/core/control_plane.h"
#include "daemon/core/daemon_testutil.h"
#include "daemon/core/factor_pipeline.h"
#include "daemon/core/gauges.h"
#include "daemon/core/job_layout.h"
#include "daemon/core/kv_store.h"
#include "daemon/core/peer_coordinator.h"
#include "daemon/core/peer_messages.h"
#include "daemon/core/plan_publisher.h"
#include "daemon/core/planner.h"
#include "daemon/core/registrar.h"
#include "daemon/core/series.h"
#include "daemon/core/session_table.h"
#include "daemon/core/telemetry.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/metrics.h"

namespace gift::daemon {

struct CoreParts {
  explicit CoreParts(const std::string& tag)
      : CoreParts(TestDaemonConfig(tag)) {}
  explicit CoreParts(const DaemonConfig& c)
      : config(c),
        metrics(&registry),
        store(StoreLimits{c.limits.max_store_value_bytes,
                          c.limits.max_store_job_bytes,
                          c.limits.max_store_jobs}),
        peers(config, instance, &mu),
        layout(config),
        planner(PlannerOptions{c.refresh_interval, c.audit_interval, c.rank,
                               c.selection, c.beta, !c.peer_address.empty()}),
        series(&metrics, &layout),
        core{&config,  &instance, &layout,  &sessions,
             &planner, &peers,    &metrics, &series},
        plans(core),
        telemetry(core),
        factors({core, &telemetry}),
        gauges({core, &factors}),
        registrar({core, &plans, &factors, &store}),
        control({core, absl::Now(), &plans, &factors, &registrar}),
        messages({core, &plans, &telemetry, &registrar, &gauges}) {}
  ~CoreParts() { registrar.DropAll("test done"); }

  std::string Text() const { return metrics::Serialize(registry); }

  const DaemonConfig config;
  const std::string instance = "inst0001";
  metrics::Registry registry;
  DaemonMetrics metrics;
  KvStore store;
  absl::Mutex mu;
  PeerCoordinator peers;
  JobLayout layout;
  SessionTable sessions;
  Planner planner;
  SeriesCache series;
  const CoreState core;
  PlanPublisher plans;
  Telemetry telemetry;
  FactorPipeline factors;
  Gauges gauges;
  Registrar registrar;
  ControlPlane control;
  PeerMessages messages;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_CORE_TESTUTIL_H_
