// One layer's closed sketch windows on their way to a refresh (DESIGN §4).
// Every rank closes a window of the layer each K steps; the collector sums
// the windows that end at the same step in the same basis Ω (end_step,
// omega_version) until every live rank of the node has contributed. The
// newest such window is taken (for the refresher, or with peers for the
// layer's owner); older ones can no longer complete and are dropped. On the
// layer's owner it also sums the nodes' windows until they cover the job's
// world size ("owned" windows), and names the nodes whose window is in an
// older basis than another node's window of the same step: they lack the
// factor that basis came with (its broadcast was lost, e.g. in a partition),
// and without it no window of the layer can complete again.
//
//   WindowCollector w;
//   if (!w.AddLocal(std::move(window))) { /* does not add up: dropped */ }
//   int dropped = 0;
//   std::optional<WindowSum> sum = w.TakeLocal(live_ranks, &dropped);
//   if (sum.has_value()) SubmitRefresh(*sum);
//
// The collector only counts: the caller turns `dropped` into
// gift_sketch_windows_total{result="incomplete"} and logs.
//
// Thread safety: not thread-safe; the daemon holds its mutex around every
// use.
#ifndef GIFT_DAEMON_CORE_WINDOW_COLLECTOR_H_
#define GIFT_DAEMON_CORE_WINDOW_COLLECTOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shm/protocol.h"

namespace gift::daemon {

// Window sums a layer keeps while its ranks' windows do not line up.
inline constexpr size_t kMaxPendingWindows = 8;
// Owned window sums older than this many windows can no longer complete.
inline constexpr size_t kOwnedWindows = 4;

// The running sum of one window.
struct WindowSum {
  shm::SketchData sum;
  int contributors = 0;
  // Owned windows: the nodes that contributed (for logs), and how many of
  // them have been named lagging (Owned::lagging).
  std::vector<std::string> sources;
  size_t lagging_named = 0;
};

// Adds `data` to `p` (the first one is taken as it is); false (nothing
// added) when its width (meta.k) or sizes differ or the row count would
// overflow. Does not change p.contributors.
bool AddSketch(WindowSum& p, shm::SketchData data);

class WindowCollector {
 public:
  // (end_step, omega_version) of a window.
  using Key = std::pair<int64_t, int64_t>;

  // ---- this node's ranks
  // One rank's closed window; false (nothing added) when it does not add up
  // with the others of its key.
  bool AddLocal(shm::SketchData data);
  // The newest window that `live` ranks contributed to, removed with every
  // window not newer than it; then the oldest windows beyond
  // kMaxPendingWindows. `*dropped` += the windows removed unused.
  std::optional<WindowSum> TakeLocal(int live, int* dropped);
  // Every local rank left: their partial sums can never complete.
  void ClearLocal() { pending_.clear(); }
  size_t pending_windows() const { return pending_.size(); }

  // ---- the layer's owner (with peers)
  struct Owned {
    enum Result {
      kMismatch,  // does not add up with the window's sum: dropped
      kWaiting,   // added; the window is not complete yet
      kComplete,  // the window covers the world size: `sum` is it
      kTooMany,   // more contributors than the world size: dropped
    };
    Result result = kWaiting;
    std::optional<WindowSum> sum;  // kComplete
    // kTooMany: the window's contributors and sources, for the log.
    int contributors = 0;
    std::vector<std::string> sources;
    // Nodes whose sum of this window's step is in an older basis than
    // another node's, with that older basis (a factor version; -1: Ω₀);
    // each node once per window. `basis`: the newest basis of the step. Any
    // result.
    std::vector<std::pair<std::string, int64_t>> lagging;
    int64_t basis = -1;
  };
  // One node's sum of a window (`contributors` ranks). With world_size > 0,
  // a window reaching it ends the collection of it and of every window not
  // newer; beyond kOwnedWindows the oldest are dropped. `*dropped` += the
  // windows removed unused (a kTooMany window among them).
  Owned AddOwned(const std::string& node, int contributors,
                 shm::SketchData data, int world_size, int* dropped);
  size_t owned_windows() const { return owned_.size(); }

 private:
  // Fills out.lagging and out.basis for the owned windows ending at
  // `end_step` (at least one).
  void NameLagging(int64_t end_step, Owned& out);

  std::map<Key, WindowSum> pending_;
  std::map<Key, WindowSum> owned_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CORE_WINDOW_COLLECTOR_H_
