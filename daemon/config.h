// giftd's configuration: one table of options, read from a YAML file
// (`--config giftd.yaml`) and then from command-line flags, which override
// the file. Every option has a default, a one-line help text and a check;
// the same table produces `giftd --help`, `--print-config` (the effective
// configuration as YAML, which `--config` reads back unchanged) and the
// README's option list.
//
//   ASSIGN_OR_RETURN(DaemonConfig config, LoadConfig(argc, argv));
//   if (config.print_config) std::cout << FormatConfig(config);
//
// Errors are INVALID_ARGUMENT with the file:line or the flag and the reason:
// unknown key or flag, wrong type, out-of-range value, unreadable file,
// malformed YAML. Nothing is partially applied: LoadConfig returns a
// complete valid config or an error.
//
// Thread safety: plain data and pure functions.
#ifndef GIFT_DAEMON_CONFIG_H_
#define GIFT_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/agent_socket.h"
#include "daemon/limits.h"
#include "daemon/selector.h"

namespace gift::daemon {

struct DaemonConfig {
  // ---- identity and endpoints
  std::string node;  // Default: the host name.
  // Unix socket of the Agent service. Default: /tmp/gift/agent.sock
  // (kDefaultAgentSocket, the clients' default too).
  std::string agent_socket = kDefaultAgentSocket;
  // Control service host:port. Default: 127.0.0.1:50151.
  std::string control_address = "127.0.0.1:50151";
  // Prometheus /metrics host:port; "" disables. Default: 127.0.0.1:9464.
  std::string metrics_address = "127.0.0.1:9464";
  // Bearer token file for Control when not bound to loopback (required
  // then; loopback is localhost, 127.0.0.0/8 or ::1, net::IsLoopbackHost).
  // Default: "".
  std::string control_token_file;
  // TLS for Control (both or neither). Default: "".
  std::string tls_cert_file;
  std::string tls_key_file;
  // POSIX shm name prefix. Default: /gift-<node>.
  std::string shm_prefix;

  // ---- plan defaults (changeable at run time through Control)
  int refresh_interval = 25;  // K, steps. REQUIRES: >= 1.
  int rank = 32;              // r. REQUIRES: 1 <= rank <= max_rank.
  int max_rank = 64;          // slot capacity. REQUIRES: >= 1.
  int probe_interval = 10;    // M, steps. REQUIRES: >= 1.
  // Steps between audit steps (an FP32 allreduce beside the quantized one,
  // measuring what was applied); 0 = none. REQUIRES: [0, kMaxAuditInterval].
  int audit_interval = 100;
  int sketch_rows = 512;  // rows per layer and step. REQUIRES: >= 1.
  // Sketch oversampling p: a window sketches r + p columns of Ω (DESIGN
  // §2), the shared memory holds max_rank + p. REQUIRES: [0,
  // shm::kMaxOversample]. Every member of a multi-node job must agree.
  int sketch_oversample = 16;
  // Sketch stride s: a window samples rows on every s-th step only; 0 =
  // auto, max(1, K / 16). REQUIRES: >= 0.
  int sketch_stride = 0;
  // A GIFT-path layer whose factor subspace holds is sketched in every P-th
  // window only, P up to this; 0 = auto ((staleness_limit - max(K,
  // staleness_limit / 4)) / K: the factor stays younger than the limit), 1 =
  // every window. REQUIRES: >= 0.
  int max_sketch_period = 0;
  // Steps a factor may age before a rank drops the layer to Euclidean.
  // Default: 200. REQUIRES: >= 1.
  int staleness_limit = 200;
  double beta = 1.0;  // low-rank damping β. REQUIRES: > 0.
  // `beta: auto`: every low-rank layer without a β of its own starts at
  // β = 1 and giftd builds its next factors with the β of the grid (0.3, 1,
  // 3) its probes measured best (DESIGN §2's auto mode). Default: false.
  bool beta_auto = false;
  double full_beta = 0.3;  // full-transform τ factor. REQUIRES: > 0.
  // Largest d_in allowed the `full` transform. Default: 4096. REQUIRES: >= 1.
  int full_max_d_in = 4096;
  std::string transform = "lowrank";  // default transform: lowrank|full
  std::string format = "e4m3";  // default wire format: e4m3|e5m2|nvfp4|mxfp4
  uint64_t omega_seed = 0x9E3779B97F4A7C15ULL;
  SelectorPolicy selection;  // selection.* keys

  // ---- multi-node job (the Peer service, DESIGN §4). Empty peer_address:
  // a one-node giftd (no Peer server, it adopts the job of its ranks).
  // REQUIRES with peer_address: job_id, leader_address and job_token_file.
  std::string job_id;        // the job this giftd serves
  std::string peer_address;  // Peer server host:port, e.g. 0.0.0.0:50152
  // How the other daemons reach this one. Default: peer_address (which
  // must then not be a wildcard address).
  std::string peer_advertise_address;
  // The leader's Peer host:port (like MASTER_ADDR); this giftd is the
  // leader when it equals the advertise address.
  std::string leader_address;
  // File holding the job's peer token (never taken from the command line).
  std::string job_token_file;
  // Peer TLS: server certificate and key (both or neither) and the CA
  // bundle peers are verified with. Default: "" (no TLS).
  std::string peer_tls_cert_file;
  std::string peer_tls_key_file;
  std::string peer_tls_ca_file;
  // A follower silent this long is dropped by the leader. Default: 10000.
  // REQUIRES: > poll_interval_ms.
  int peer_timeout_ms = 10000;
  // Leader election (issue 16): "etcd://host:port[,host:port...]" (etcds://
  // for HTTPS). With it the job's daemons campaign for the leader key of
  // job_id on etcd and follow whoever holds it; leader_address must then be
  // empty. Default: "" (the static leader_address).
  std::string coordinator;
  // The election lease, seconds: a leader whose keepalives fail this long
  // steps down. Default: 5. REQUIRES: [2, 3600].
  int coordinator_ttl_s = 5;
  // etcd authentication (user and a file holding the password) and TLS
  // (CA bundle; client certificate and key, both or neither).
  std::string coordinator_user;
  std::string coordinator_password_file;
  std::string coordinator_ca_file;
  std::string coordinator_cert_file;
  std::string coordinator_key_file;

  // ---- daemon
  int refresh_threads = 2;  // REQUIRES: >= 1.
  // CUDA device of the refresher; -1 = CPU. Default: -1.
  int refresher_device = -1;
  int heartbeat_interval_ms = 1000;  // REQUIRES: >= 10.
  // A rank silent this long (or whose pid is gone) is reaped.
  // Default: 10000. REQUIRES: > heartbeat_interval_ms.
  int rank_timeout_ms = 10000;
  // Telemetry poll / selector period. Default: 100. REQUIRES: >= 10.
  int poll_interval_ms = 100;
  std::string log_level = "info";  // debug|info|warning|error
  Limits limits;  // max_* options: what ranks and operators may send

  // ---- not options: what the command line asked for
  bool print_config = false;
  bool help = false;
  bool help_markdown = false;  // --help-markdown: the README option table
};

// Parses argv (argv[0] skipped): --config FILE first, then every other
// --key=value / --key value (key names as in the YAML file with '_' or
// '-'; selection.top_k is --selection.top-k), --print-config, --help.
absl::StatusOr<DaemonConfig> LoadConfig(int argc, const char* const* argv);
// The same from YAML text (file name for messages) and then flags.
absl::StatusOr<DaemonConfig> LoadConfigFromString(
    const std::string& yaml, const std::string& file_name,
    const std::vector<std::string>& flags);
// INVALID_ARGUMENT naming the first bad field. `node` and `shm_prefix` must
// be set: LoadConfig* fill their defaults, so a hand-built config should
// start from LoadConfigFromString("", "", {}). With --help, LoadConfig*
// skip validation so the help prints whatever else was given.
absl::Status ValidateConfig(const DaemonConfig& config);
// YAML, every option, with its help as a comment.
std::string FormatConfig(const DaemonConfig& config);
// The contents of a file an option names for a secret (job_token_file,
// coordinator_password_file): a regular file of at most 64 KiB, opened
// without blocking (a FIFO or /dev/zero is refused before any read).
// INVALID_ARGUMENT naming the option and the path otherwise.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const char* option);
// --help text: every option, default and help.
std::string ConfigHelp();
// Markdown table (option, default, meaning) for the README.
std::string ConfigMarkdown();

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_CONFIG_H_
