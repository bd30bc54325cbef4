// The state every component of giftd's core reads: the configuration, the
// instance id, the job's layout, the ranks' sessions, the planner, the peer
// coordination and the metrics (families and their series' handles). One
// struct, filled once by the Daemon (and by core_testutil.h in the components'
// tests), given to each component whose Parts extend it with the other
// components it calls.
//
//   CoreState core{&config, &instance, &layout,  &sessions,
//                  &planner, &peers,    &metrics, &series};
//   Telemetry telemetry(core);
//   Registrar registrar({core, &plans, &factors, &store});
//
// Thread safety: the pointers are fixed at construction; what they point to
// is guarded by the daemon's mutex, like the components themselves. A
// component that only reads a part (Gauges, ControlPlane) says so in its
// header; the struct does not enforce it.
#ifndef GIFT_DAEMON_CORE_CORE_STATE_H_
#define GIFT_DAEMON_CORE_CORE_STATE_H_

#include <string>

namespace gift::daemon {

struct DaemonConfig;
class JobLayout;
class SessionTable;
class Planner;
class PeerCoordinator;
struct DaemonMetrics;
class SeriesCache;

struct CoreState {
  const DaemonConfig* config;
  const std::string* instance;
  JobLayout* layout;
  SessionTable* sessions;
  Planner* planner;
  PeerCoordinator* peers;
  DaemonMetrics* metrics;
  SeriesCache* series;  // metrics' series handles (series.h)
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_CORE_STATE_H_
