// A multi-node GIFT job on one machine for the peer integration test and
// the peer benchmark: N giftd "nodes", each with its ranks, the daemons
// joined into one job through their Peer service (DESIGN §4).
//
// Where network namespaces can be made (root, iproute2; scripts/netns.sh
// check) node i runs in namespace PREFIX-r<i>: its ranks' Gloo traffic uses
// 10.77.0.<i+1> and its daemon's Peer service 10.77.1.<i+1>:kPeerPort, an
// address of its own on the same veth, so that a partition between the
// daemons (blackhole routes to the peers' 10.77.1.x) leaves the ranks'
// collectives alone. Elsewhere every node runs on 127.0.0.1 with its own
// ports (loopback mode; netns() says which) and a partition is simulated by
// SIGSTOP / SIGCONT of the node's daemon.
//
//   PeerClusterOptions o;
//   o.netns_script = GIFT_NETNS_SCRIPT;
//   ASSIGN_OR_RETURN(auto c, PeerCluster::Create(binaries, dir, o));
//   RETURN_IF_ERROR(c->StartDaemons());
//   RETURN_IF_ERROR(c->StartRanks());
//   ... c->WaitForAll([](const json& l) { ... }, absl::Seconds(60));
//   RETURN_IF_ERROR(c->RecordsAgree(&steps));
//   RETURN_IF_ERROR(c->StopRanks(absl::Seconds(30)));
//
// Thread safety: not thread-safe; one test thread drives it.
#ifndef GIFT_TESTS_DAEMON_PEER_CLUSTER_H_
#define GIFT_TESTS_DAEMON_PEER_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/giftd_fixture.h"

namespace gift::testing_daemon {

struct PeerBinaries {
  std::string giftd, giftctl, rank_worker;
};

struct PeerClusterOptions {
  int nodes = 3;           // REQUIRES: 1..8
  int ranks_per_node = 2;  // REQUIRES: >= 1
  std::string job = "peerjob";
  // false: the daemons run as independent one-node giftds (no peer flags);
  // the ranks then rendezvous through a FileStore. Default: true.
  bool peers = true;
  // scripts/netns.sh; "" or unusable: loopback mode.
  std::string netns_script;
  // Namespaces beyond the nodes, for extra daemons (ExtraDaemon). Default: 1.
  int spare_nodes = 1;
  // Every daemon's base config, with the largest audit margin (10): the
  // tests follow factor versions on the GIFT path for hundreds of steps, and
  // on the committed data the audit rule takes the real layers off it at
  // their second audit (step 200: applied RelL2 1.2-3.2× the Euclidean
  // reference), after which a slower run would wait for versions that never
  // come. The audits themselves still run on every node.
  GiftdConfig giftd = [] {
    GiftdConfig c;
    c.extra_yaml = "  audit_margin: 10\n";
    return c;
  }();
  int step_sleep_ms = 10;              // rank_worker --step-sleep-ms
  std::vector<std::string> rank_args;  // more rank_worker flags
  // Leader election on a coordinator (issue 16): when set, the flags that
  // put the daemon at `slot` on it, e.g. {"--coordinator=etcd://127.0.0.1:
  // 2379", "--coordinator-ttl-s=2"} (a function, so that each daemon may get
  // a coordinator address of its own). PeerFlags then leaves out
  // --leader-address and no node is assumed to lead. Default: none (a
  // static leader, node 0).
  std::function<std::vector<std::string>(int slot)> coordinator_flags;
};

class PeerCluster {
 public:
  // The Peer port of every daemon in netns mode (each has its own address).
  static constexpr int kPeerPort = 50152;

  // Sets up the namespaces (or decides on loopback, printing why) and writes
  // the job token file (mode 0600) in `dir`. Starts nothing else.
  static absl::StatusOr<std::unique_ptr<PeerCluster>> Create(
      const PeerBinaries& binaries, const std::string& dir,
      const PeerClusterOptions& options);
  // Kills the ranks, stops the daemons, removes the namespaces.
  ~PeerCluster();

  bool netns() const { return !prefix_.empty(); }
  std::string mode() const;
  int nodes() const { return options_.nodes; }
  int world_size() const { return options_.nodes * options_.ranks_per_node; }
  const std::string& token_file() const { return token_file_; }

  // Node i's daemon, node 0 first, each waiting until serving. Without a
  // coordinator node 0 is the leader; with one the election decides.
  absl::Status StartDaemons();
  Giftd& daemon(int node) { return *daemons_[node]; }
  // A replacement daemon on `node` after its daemon ended (Kill): a new
  // giftd at the same slot with the same config and flags (agent socket,
  // Peer address, coordinator), waiting until it serves.
  absl::Status ReplaceDaemon(int node);
  // What runs a command at `slot` (a node, or nodes() + k for the k-th
  // spare): netns.sh exec in its namespace, or nothing in loopback mode.
  std::vector<std::string> CommandPrefix(int slot) const;
  // Node i's Peer address (host:port), as the others reach it.
  std::string PeerAddress(int node) const;
  // The peer flags of a daemon at `slot` (a node, or nodes() + k for the
  // k-th spare) of `job` with `token_file` ("" leaves the flag out): with
  // options.coordinator_flags those flags instead of --leader-address.
  std::vector<std::string> PeerFlags(int slot, const std::string& job,
                                     const std::string& token_file) const;
  // A daemon at slot nodes() + spare, outside the job's nodes, started with
  // `extra_args` (its own dir under `name`). Fails when giftd does not
  // come up (its log in the message).
  absl::StatusOr<std::unique_ptr<Giftd>> ExtraDaemon(
      const std::string& name, int spare,
      const std::vector<std::string>& extra_args) const;

  // Every node's ranks (ranks i*R .. i*R+R-1 on node i).
  absl::Status StartRanks();
  // Rank r's complete report lines so far.
  std::vector<nlohmann::json> Report(int rank) const;
  int64_t MinSteps() const;
  // Polls until every rank's last line satisfies `pred`; fails at once when
  // a rank process ended.
  absl::Status WaitForAll(
      const std::function<bool(const nlohmann::json&)>& pred,
      absl::Duration timeout);
  // Polls until every rank reported `steps` more steps than now.
  absl::Status WaitForMoreSteps(int64_t steps, absl::Duration timeout);
  bool AllRanksRunning();
  // Every step that every rank reported: the same step number, agreed plan
  // epoch, per-layer path and factor version, and digests of the averaged
  // bucket and the parameters. FAILED_PRECONDITION naming the first
  // difference; `steps` gets the number of steps compared.
  absl::Status RecordsAgree(int64_t* steps) const;
  // SIGTERM to rank 0 (all ranks stop after the same step), then waits.
  absl::Status StopRanks(absl::Duration timeout);

  // Cuts (cut = true) or heals node's daemon off the other daemons.
  absl::Status Partition(int node, bool cut);

  // Every daemon's and rank's log, for failure messages.
  std::string Logs() const;
  // Keep `dir` at destruction (a failed test).
  void KeepDir() { keep_dir_ = true; }

 private:
  PeerCluster(const PeerBinaries& b, const std::string& dir,
              const PeerClusterOptions& o)
      : binaries_(b), dir_(dir), options_(o) {}
  absl::Status SetUpNetns();
  std::string ListenAddress(int slot) const;
  GiftdConfig NodeConfig(int slot, const std::string& name) const;

  const PeerBinaries binaries_;
  const std::string dir_;
  const PeerClusterOptions options_;
  std::string prefix_;  // namespaces PREFIX-r<i>; "" in loopback mode
  std::string token_file_;
  std::vector<int> ports_;  // loopback mode: each slot's Peer port
  std::vector<std::unique_ptr<Giftd>> daemons_;
  std::vector<std::unique_ptr<RankGroup>> ranks_;
  bool keep_dir_ = false;
};

// The factor version `layer` ran with on the GIFT path in a rank's report
// line (-1: not on it).
inline int64_t GiftVersion(const nlohmann::json& line,
                           const std::string& layer) {
  const nlohmann::json& l = line["layers"][layer];
  if (l["path"] != "gift") return -1;
  return l["version"].get<int64_t>();
}

// Every real layer (kRealLayers) ran on the GIFT path in this line.
inline bool AllRealLayersOnGift(const nlohmann::json& line) {
  for (const std::string& l : kRealLayers) {
    if (GiftVersion(line, l) < 0) return false;
  }
  return true;
}

// Runs `cmd` with sh (20 s bound); stdout and stderr together in `output`.
struct ShellResult {
  int exit_code = -1;
  std::string output;
};
ShellResult Shell(const std::string& cmd);

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_PEER_CLUSTER_H_
