// What giftd accepts from its ranks (Register, Heartbeat, the rendezvous
// store) and from operators (Control), so that no request allocates
// without bound, holds the daemon's lock for long, grows a metric series or
// a log line without bound, or overflows an integer. The tunable limits are
// giftd options (config_options.cc: `giftd --help`); the constants below are
// bounds of the protocol, the kernel or the numerics, not tunables.
//
//   if (r.layers_size() > config.limits.max_layers) ... RESOURCE_EXHAUSTED
//
// Thread safety: plain data.
#ifndef GIFT_DAEMON_LIMITS_H_
#define GIFT_DAEMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace gift::daemon {

// The damping β (beta, full_beta, SetLayerPolicy) giftd accepts: outside
// it the floor β·tr/d underflows or overflows and the factor is NaN.
inline constexpr double kMinBeta = 1e-8;
inline constexpr double kMaxBeta = 1e8;
// Largest refresh interval K (steps).
inline constexpr int kMaxRefreshInterval = 1000000;

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_LIMITS_H_
