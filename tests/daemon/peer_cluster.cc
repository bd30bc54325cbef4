#include "tests/daemon/peer_cluster.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace gift::testing_daemon {
namespace {

using json = nlohmann::json;

constexpr char kNetnsBase[] = "gpc";

// The Peer subnet beside netns.sh's 10.77.0.0/24: its own addresses, so
// that routes can cut the daemons apart without touching the ranks.
std::string PeerIp(int slot) { return absl::StrCat("10.77.1.", slot + 1); }

absl::Status WriteToken(const std::string& path) {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&token, absl::Hex(rd()));
  {
    std::ofstream f(path);
    f << token;  // no newline: the token is the whole file
    if (!f) return absl::InternalError("cannot write " + path);
  }
  std::error_code ec;
  std::filesystem::permissions(
      path,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
      std::filesystem::perm_options::replace, ec);
  if (ec)
    return absl::InternalError("chmod 0600 " + path + ": " + ec.message());
  return absl::OkStatus();
}

// The fields of a report line every rank must agree on at one step.
json Agreed(const json& line) {
  return {{"step", line.value("step", json())},
          {"epoch", line.value("epoch", json())},
          {"layers", line.value("layers", json())},
          {"digest", line.value("digest", json())},
          {"params", line.value("params", json())}};
}

}  // namespace

ShellResult Shell(const std::string& cmd) {
  ShellResult r;
  FILE* p = ::popen(absl::StrCat("timeout 20 ", cmd, " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

absl::StatusOr<std::unique_ptr<PeerCluster>> PeerCluster::Create(
    const PeerBinaries& binaries, const std::string& dir,
    const PeerClusterOptions& options) {
  if (options.nodes < 1 || options.nodes > 8 || options.ranks_per_node < 1 ||
      options.spare_nodes < 0) {
    return absl::InvalidArgumentError("need 1..8 nodes, >= 1 rank per node");
  }
  std::unique_ptr<PeerCluster> c(new PeerCluster(binaries, dir, options));
  c->token_file_ = dir + "/job.token";
  RETURN_IF_ERROR(WriteToken(c->token_file_));
  RETURN_IF_ERROR(c->SetUpNetns());
  if (!c->netns()) {
    for (int i = 0; i < options.nodes + options.spare_nodes; ++i) {
      ASSIGN_OR_RETURN(const int port, FreePort());
      c->ports_.push_back(port);
    }
  }
  std::cout << "peer cluster: " << c->mode() << std::endl;
  return c;
}

absl::Status PeerCluster::SetUpNetns() {
  const std::string& script = options_.netns_script;
  std::string why = "no netns script given: loopback chosen";
  if (!script.empty()) {
    Shell(absl::StrCat(script, " gc ", kNetnsBase));
    const ShellResult check = Shell(script + " check");
    why = std::string(absl::StripAsciiWhitespace(check.output));
    if (check.exit_code == 0) {
      static std::atomic<int> counter{0};
      // gc removes BASE<pid>-*: the pid must end where the '-' begins.
      const std::string prefix = absl::StrCat(kNetnsBase, ::getpid());
      if (counter++ > 0) Shell(absl::StrCat(script, " down -p ", prefix));
      const int slots = options_.nodes + options_.spare_nodes;
      const ShellResult up = Shell(
          absl::StrCat(script, " up -p ", prefix, " -w ", slots, " -r none"));
      if (up.exit_code != 0) {
        return absl::InternalError("netns.sh up: " + up.output);
      }
      prefix_ = prefix;
      for (int i = 0; i < slots; ++i) {
        const ShellResult a =
            Shell(absl::StrCat("ip -n ", prefix_, "-r", i, " addr add ",
                               PeerIp(i), "/24 dev eth0"));
        if (a.exit_code != 0) return absl::InternalError(a.output);
      }
      return absl::OkStatus();
    }
  }
  std::cout << "network namespaces unavailable (" << why
            << "): the nodes run on loopback ports of 127.0.0.1" << std::endl;
  return absl::OkStatus();
}

PeerCluster::~PeerCluster() {
  if (keep_dir_) std::cerr << Logs() << "(files kept in " << dir_ << ")\n";
  ranks_.clear();  // SIGKILLs ranks still running
  std::vector<std::string> shm_prefixes;
  for (auto& d : daemons_) {
    if (!d) continue;
    if (d->Running()) ::kill(d->pid(), SIGCONT);  // a simulated partition
    shm_prefixes.push_back(d->shm_name_prefix());
    d.reset();  // SIGTERM, so it unlinks its shared memory
  }
  for (const std::string& p : shm_prefixes) {
    for (const auto& [name, bytes] : ShmObjects(p)) {
      std::filesystem::remove("/dev/shm/" + name);
    }
  }
  if (netns()) Shell(absl::StrCat(options_.netns_script, " down -p ", prefix_));
  if (!keep_dir_) std::filesystem::remove_all(dir_);
}

std::string PeerCluster::mode() const {
  if (netns()) {
    return absl::StrCat(options_.nodes, " nodes in network namespaces ",
                        prefix_, "-r0.. (ranks on 10.77.0.x, daemons on ",
                        PeerIp(0), ":", kPeerPort, "..)");
  }
  return absl::StrCat(options_.nodes,
                      " nodes on loopback ports (network namespaces "
                      "unavailable)");
}

std::vector<std::string> PeerCluster::CommandPrefix(int slot) const {
  if (!netns()) return {};
  return {options_.netns_script, "exec", "-p", prefix_, absl::StrCat(slot)};
}

std::string PeerCluster::ListenAddress(int slot) const {
  if (netns()) return absl::StrCat(PeerIp(slot), ":", kPeerPort);
  return absl::StrCat("127.0.0.1:", ports_[slot]);
}

std::string PeerCluster::PeerAddress(int node) const {
  return ListenAddress(node);
}

std::vector<std::string> PeerCluster::PeerFlags(
    int slot, const std::string& job, const std::string& token_file) const {
  std::vector<std::string> f = {"--job-id=" + job,
                                "--peer-address=" + ListenAddress(slot)};
  if (options_.coordinator_flags) {
    // The election decides who leads: giftd refuses --leader-address too.
    for (std::string& c : options_.coordinator_flags(slot)) {
      f.push_back(std::move(c));
    }
  } else {
    f.push_back("--leader-address=" + ListenAddress(0));
  }
  if (!token_file.empty()) f.push_back("--job-token-file=" + token_file);
  return f;
}

GiftdConfig PeerCluster::NodeConfig(int slot, const std::string& name) const {
  GiftdConfig c = options_.giftd;
  c.node = name;
  c.command_prefix = CommandPrefix(slot);
  return c;
}

absl::Status PeerCluster::StartDaemons() {
  for (int i = 0; i < options_.nodes; ++i) {
    const std::string name = absl::StrCat("node", i);
    const std::string dir = absl::StrCat(dir_, "/", name);
    std::filesystem::create_directories(dir);
    GiftdConfig c = NodeConfig(i, name);
    if (options_.peers) {
      for (std::string& f : PeerFlags(i, options_.job, token_file_)) {
        c.extra_args.push_back(std::move(f));
      }
    }
    ASSIGN_OR_RETURN(auto d,
                     Giftd::Start(binaries_.giftd, binaries_.giftctl, dir, c));
    daemons_.push_back(std::move(d));
  }
  return absl::OkStatus();
}

absl::Status PeerCluster::ReplaceDaemon(int node) {
  if (node < 0 || node >= static_cast<int>(daemons_.size())) {
    return absl::InvalidArgumentError("no such node");
  }
  // Same config file, flags and command prefix: the node's slot again.
  return daemons_[node]->Restart();
}

absl::StatusOr<std::unique_ptr<Giftd>> PeerCluster::ExtraDaemon(
    const std::string& name, int spare,
    const std::vector<std::string>& extra_args) const {
  if (spare < 0 || spare >= options_.spare_nodes) {
    return absl::InvalidArgumentError("no such spare slot");
  }
  const std::string dir = absl::StrCat(dir_, "/", name);
  std::filesystem::create_directories(dir);
  GiftdConfig c = NodeConfig(options_.nodes + spare, name);
  c.extra_args = extra_args;
  return Giftd::Start(binaries_.giftd, binaries_.giftctl, dir, c);
}

absl::Status PeerCluster::StartRanks() {
  const int r = options_.ranks_per_node;
  const std::string store = dir_ + "/filestore";
  if (!options_.peers) std::filesystem::create_directories(store);
  for (int i = 0; i < options_.nodes; ++i) {
    RankOptions o;
    o.job = options_.job;
    o.world_size = world_size();
    o.first_rank = i * r;
    o.count = r;
    o.step_sleep_ms = options_.step_sleep_ms;
    o.extra_args = options_.rank_args;
    // Without peers the nodes' daemon stores are separate: the ranks meet
    // in a shared directory instead.
    if (!options_.peers) o.extra_args.push_back("--store=" + store);
    o.command_prefix = CommandPrefix(i);
    ASSIGN_OR_RETURN(auto g, RankGroup::Start(binaries_.rank_worker,
                                              absl::StrCat(dir_, "/node", i),
                                              daemons_[i]->agent_socket(), o));
    ranks_.push_back(std::move(g));
  }
  return absl::OkStatus();
}

std::vector<json> PeerCluster::Report(int rank) const {
  const int r = options_.ranks_per_node;
  return ranks_[rank / r]->Report(rank % r);
}

int64_t PeerCluster::MinSteps() const {
  int64_t steps = INT64_MAX;
  for (const auto& g : ranks_) steps = std::min(steps, g->MinSteps());
  return ranks_.empty() ? 0 : steps;
}

bool PeerCluster::AllRanksRunning() {
  for (auto& g : ranks_) {
    if (g->EndedRank() >= 0) return false;
  }
  return true;
}

absl::Status PeerCluster::WaitForAll(
    const std::function<bool(const json&)>& pred, absl::Duration timeout) {
  bool ended = false;
  const bool ok = WaitFor(
      [&] {
        ended = !AllRanksRunning();
        if (ended) return true;
        for (const auto& g : ranks_) {
          if (!g->AllLast(pred)) return false;
        }
        return true;
      },
      timeout, absl::Milliseconds(100));
  if (ended) return absl::FailedPreconditionError("a rank process ended");
  if (!ok) {
    std::string last;
    for (int i = 0; i < world_size(); ++i) {
      const std::vector<json> rep = Report(i);
      absl::StrAppend(&last, "\n rank ", i, ": ",
                      rep.empty() ? "none" : rep.back().dump());
    }
    return absl::DeadlineExceededError("timed out; last lines:" + last);
  }
  return absl::OkStatus();
}

absl::Status PeerCluster::WaitForMoreSteps(int64_t steps,
                                           absl::Duration timeout) {
  const int64_t want = MinSteps() + steps;
  RETURN_IF_ERROR(
      WaitForAll([&](const json& l) { return l["step"] >= want; }, timeout));
  return absl::OkStatus();
}

absl::Status PeerCluster::RecordsAgree(int64_t* steps) const {
  std::vector<std::vector<json>> reps;
  size_t common = SIZE_MAX;
  for (int i = 0; i < world_size(); ++i) {
    reps.push_back(Report(i));
    common = std::min(common, reps.back().size());
  }
  for (size_t s = 0; s < common; ++s) {
    const json want = Agreed(reps[0][s]);
    if (want["step"] != s) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank 0's line ", s, " is step ", want["step"].dump()));
    }
    for (int i = 1; i < world_size(); ++i) {
      const json got = Agreed(reps[i][s]);
      if (got != want) {
        return absl::FailedPreconditionError(
            absl::StrCat("step ", s, ": rank ", i, " differs from rank 0:\n  ",
                         got.dump(), "\n  ", want.dump()));
      }
    }
  }
  *steps = static_cast<int64_t>(common);
  return absl::OkStatus();
}

absl::Status PeerCluster::StopRanks(absl::Duration timeout) {
  std::string bad;
  for (auto& g : ranks_) {
    absl::Status s = g->Stop(timeout);
    if (!s.ok()) absl::StrAppend(&bad, s.message(), "\n");
  }
  if (bad.empty()) return absl::OkStatus();
  return absl::InternalError(bad);
}

absl::Status PeerCluster::Partition(int node, bool cut) {
  if (!netns()) {
    // Loopback: a stopped daemon answers nobody, like one cut off.
    if (::kill(daemons_[node]->pid(), cut ? SIGSTOP : SIGCONT) != 0) {
      return absl::InternalError("kill(SIGSTOP/SIGCONT) failed");
    }
    return absl::OkStatus();
  }
  const char* verb = cut ? "add" : "del";
  for (int j = 0; j < options_.nodes + options_.spare_nodes; ++j) {
    if (j == node) continue;
    for (const auto& [ns, to] :
         {std::pair<int, int>{node, j}, std::pair<int, int>{j, node}}) {
      const ShellResult r =
          Shell(absl::StrCat("ip -n ", prefix_, "-r", ns, " route ", verb,
                             " blackhole ", PeerIp(to), "/32"));
      if (r.exit_code != 0) {
        return absl::InternalError("ip route " + std::string(verb) + ": " +
                                   r.output);
      }
    }
  }
  return absl::OkStatus();
}

std::string PeerCluster::Logs() const {
  std::string s;
  for (size_t i = 0; i < daemons_.size(); ++i) {
    if (daemons_[i])
      absl::StrAppend(&s, "==== node ", i, " giftd\n", daemons_[i]->Log());
  }
  for (const auto& g : ranks_) absl::StrAppend(&s, g->Logs());
  return s;
}

}  // namespace gift::testing_daemon
