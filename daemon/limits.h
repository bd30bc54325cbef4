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

struct Limits {
  // Largest d_in of a declared layer (a data region holds about
  // 2 KiB × d_in at max_rank 64). Default: 131072. REQUIRES: 1 <= value <=
  // 16777216 (shm::kMaxDIn).
  int64_t max_layer_d_in = 131072;
  // Largest d_out of a declared layer. Default: 1048576. REQUIRES: 1 <=
  // value <= 2^31.
  int64_t max_layer_d_out = 1048576;
  // Layers one rank may declare. Default: 4096. REQUIRES: 1 <= value <=
  // 65536.
  int max_layers = 4096;
  // Shared memory of one rank: control block, data regions and, for layers
  // on the full transform, full regions. A 70B-parameter model needs about
  // 13 GiB at max_rank 64. Default: 68719476736 (64 GiB). REQUIRES: >= 1.
  int64_t max_rank_shm_bytes = int64_t{64} << 30;
  // Ranks registered with this giftd at once. Default: 256. REQUIRES: 1 <=
  // value <= 4096.
  int max_local_ranks = 256;
  // Sessions one process may hold. Default: 64. REQUIRES: 1 <= value <=
  // 4096.
  int max_sessions_per_pid = 64;
  // Bytes of a job id; it is a label of every metric series, so only ASCII
  // letters, digits and . _ - : @ + = / are allowed. Default: 128.
  // REQUIRES: 1 <= value <= 1024.
  int max_job_id_bytes = 128;
  // Bytes of a layer name (printable ASCII; a metric label too). Default:
  // 127. REQUIRES: 1 <= value <= 127 (the control block's name field).
  int max_layer_name_bytes = 127;
  // Rendezvous store: bytes of one value. Default: 1048576. REQUIRES: 1 <=
  // value <= 4194304 (gRPC's message limit).
  int64_t max_store_value_bytes = 1 << 20;
  // Rendezvous store: bytes of one job's keys and values. Default: 67108864
  // (64 MiB). REQUIRES: >= 1.
  int64_t max_store_job_bytes = int64_t{64} << 20;
  // Rendezvous store: jobs holding keys at once; a new job then replaces
  // the least recently used one that is not the job of the registered
  // ranks. Default: 8. REQUIRES: 1 <= value <= 1024.
  int max_store_jobs = 8;
};

// The damping β (beta, full_beta, SetLayerPolicy) giftd accepts: outside
// it the floor β·tr/d underflows or overflows and the factor is NaN.
inline constexpr double kMinBeta = 1e-8;
inline constexpr double kMaxBeta = 1e8;
// Linux's PID_MAX_LIMIT: no pid is above it.
inline constexpr int64_t kMaxPid = int64_t{1} << 22;
// Largest world size of a job.
inline constexpr int kMaxWorldSize = 1 << 20;
// Largest refresh interval K (steps).
inline constexpr int kMaxRefreshInterval = 1000000;
// Largest audit interval (steps between audit steps).
inline constexpr int kMaxAuditInterval = 1000000;
// Bytes of a rendezvous store key.
inline constexpr size_t kMaxStoreKeyBytes = 1024;
// Bytes of a device PCI bus id ("0000:3b:00.0").
inline constexpr size_t kMaxPciBusIdBytes = 32;

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_LIMITS_H_
