// peer_bench: the cost of job-wide coordination (issue 6, DESIGN §4) with
// three giftd nodes of two ranks each (tests/daemon/peer_cluster.h; loopback
// ports, or network namespaces with --netns) running daemon_bench_rank's
// synthetic d × d layers, all pinned onto the GIFT path:
//  * bytes the daemons exchange per refresh per layer (sketch windows to
//    the owner, factors from it; the daemons' peer byte counters on
//    /metrics) against the bytes of the layer's FP32 gradient;
//  * the rank step time with peers against one giftd serving all six ranks
//    (no peers): what the agreement across nodes adds per step;
//  * from `giftctl set-interval` on a follower to the new K in every rank's
//    report.
//
//   peer_bench [--steps 200] [--layers 4] [--dim 256] [--rank 32]
//              [--refresh-interval 5] [--step-sleep-ms 5] [--changes 3]
//              [--netns] [--out FILE.json]
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"
#include "tests/daemon/peer_cluster.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;
using testing_daemon::Giftd;
using testing_daemon::GiftdConfig;
using testing_daemon::Int;
using testing_daemon::PeerCluster;
using testing_daemon::RankGroup;
using testing_daemon::WaitFor;

struct Options {
  std::string out;
  int steps = 200, layers = 4, dim = 256, rank = 32, refresh_interval = 5;
  int step_sleep_ms = 5, changes = 3;
  bool netns = false;
};

absl::StatusOr<Options> Parse(int argc, char** argv) {
  Options o;
  RETURN_IF_ERROR(
      testing_daemon::ParseFlagsInto(argc, argv,
                                     {{"out", &o.out},
                                      {"steps", &o.steps},
                                      {"layers", &o.layers},
                                      {"dim", &o.dim},
                                      {"rank", &o.rank},
                                      {"refresh-interval", &o.refresh_interval},
                                      {"step-sleep-ms", &o.step_sleep_ms},
                                      {"changes", &o.changes},
                                      {"netns", &o.netns}}));
  if (o.steps < 10 || o.layers < 1 || o.dim < 8 || o.changes < 1) {
    return absl::InvalidArgumentError("steps >= 10, layers >= 1, dim >= 8");
  }
  return o;
}

GiftdConfig BenchGiftd(const Options& o) {
  GiftdConfig c;
  c.refresh_interval = o.refresh_interval;
  c.staleness_limit = 100000000;
  c.rank = o.rank;
  c.top_k = o.layers;
  c.min_gain = 0;
  c.probe_interval = 1000;
  c.rank_timeout_ms = 30000;
  c.log_level = "warning";
  return c;
}

std::vector<std::string> RankArgs(const Options& o) {
  return {absl::StrCat("--layers=", o.layers), absl::StrCat("--dim=", o.dim)};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Peer bytes sent by message kind, summed over one /metrics text: every
// sample of a gift_peer_* family with "bytes" in its name and a kind label
// (the sent direction only, where a direction label or name says).
std::map<std::string, double> PeerBytes(const std::string& metrics) {
  static const std::regex line(
      R"(^(gift_peer\w*bytes\w*)\{([^}]*)\}\s+([0-9.eE+-]+))");
  static const std::regex kind(R"(kind="([^"]+)\")");
  std::map<std::string, double> out;
  std::istringstream in(metrics);
  for (std::string l; std::getline(in, l);) {
    std::smatch m, k;
    if (!std::regex_search(l, m, line)) continue;
    const std::string name = m[1], labels = m[2];
    if (name.find("received") != std::string::npos ||
        labels.find("direction=\"received\"") != std::string::npos ||
        !std::regex_search(labels, k, kind)) {
      continue;
    }
    out[k[1]] += std::stod(m[3]);
  }
  return out;
}

// Sum over the nodes of the sent peer bytes by kind, and the factor
// versions the leader knows per layer.
struct Snapshot {
  std::map<std::string, double> bytes;
  std::map<std::string, int64_t> versions;
};

absl::StatusOr<Snapshot> Take(PeerCluster& c) {
  Snapshot s;
  for (int n = 0; n < c.nodes(); ++n) {
    ASSIGN_OR_RETURN(std::string m, c.daemon(n).Metrics());
    for (const auto& [k, b] : PeerBytes(m)) s.bytes[k] += b;
  }
  ASSIGN_OR_RETURN(json layers, c.daemon(0).CtlJson({"layers"}));
  for (const json& l : testing_daemon::Field(layers, "layers")) {
    s.versions[testing_daemon::Str(l, "name")] = Int(l, "factor_version");
  }
  return s;
}

bool AllGift(const std::vector<json>& last, int layers) {
  for (const json& l : last) {
    if (!l.contains("gift_layers") || l["gift_layers"] != layers) return false;
  }
  return !last.empty();
}

// Median step_ms of every rank's steps from `from` (report lines) on.
double StepMs(const std::vector<std::vector<json>>& reps,
              const std::vector<size_t>& from) {
  std::vector<double> ms;
  for (size_t r = 0; r < reps.size(); ++r) {
    for (size_t i = from[r]; i < reps[r].size(); ++i) {
      ms.push_back(reps[r][i]["step_ms"].get<double>());
    }
  }
  return Median(ms);
}

struct Results {
  json j;
};

absl::Status PinAll(const Giftd& d, int layers) {
  for (int l = 0; l < layers; ++l) {
    RETURN_IF_ERROR(d.CtlJson({"pin", absl::StrCat("layer", l)}).status());
  }
  return absl::OkStatus();
}

absl::Status WithPeers(const Options& o, const std::string& dir, Results* res) {
  testing_daemon::PeerClusterOptions co;
  co.job = "peerbench";
  if (o.netns) co.netns_script = GIFT_NETNS_SCRIPT;
  co.giftd = BenchGiftd(o);
  co.step_sleep_ms = o.step_sleep_ms;
  co.rank_args = RankArgs(o);
  ASSIGN_OR_RETURN(
      auto c,
      PeerCluster::Create(
          {GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, GIFT_BENCH_RANK_BIN}, dir, co));
  RETURN_IF_ERROR(c->StartDaemons());
  RETURN_IF_ERROR(c->StartRanks());
  auto last = [&] {
    std::vector<json> v;
    for (int r = 0; r < c->world_size(); ++r) {
      auto rep = c->Report(r);
      if (!rep.empty()) v.push_back(rep.back());
    }
    return v;
  };
  if (!WaitFor([&] { return c->MinSteps() > 0; }, absl::Seconds(120))) {
    return absl::DeadlineExceededError("the ranks never stepped");
  }
  RETURN_IF_ERROR(PinAll(c->daemon(1), o.layers));  // forwarded to the leader
  if (!WaitFor([&] { return AllGift(last(), o.layers); }, absl::Seconds(180),
               absl::Milliseconds(200))) {
    return absl::DeadlineExceededError("layers never on GIFT everywhere");
  }
  ASSIGN_OR_RETURN(Snapshot a, Take(*c));
  std::vector<size_t> from;
  for (int r = 0; r < c->world_size(); ++r) from.push_back(c->Report(r).size());
  RETURN_IF_ERROR(c->WaitForMoreSteps(o.steps, absl::Seconds(600)));
  ASSIGN_OR_RETURN(Snapshot b, Take(*c));
  std::vector<std::vector<json>> reps;
  for (int r = 0; r < c->world_size(); ++r) reps.push_back(c->Report(r));
  int64_t refreshes = 0;
  for (const auto& [name, v] : b.versions) {
    if (a.versions.count(name) && a.versions[name] >= 0) {
      refreshes += v - a.versions[name];
    }
  }
  json bytes = json::object();
  for (const auto& [k, v] : b.bytes) bytes[k] = v - a.bytes[k];
  res->j["peers"] = {{"mode", c->mode()},
                     {"refreshes", refreshes},
                     {"bytes_by_kind", bytes},
                     {"step_ms_median", StepMs(reps, from)}};

  std::vector<double> apply_ms;
  for (int i = 0; i < o.changes; ++i) {
    const int k = o.refresh_interval + 2 + i;
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(
        c->daemon(2).CtlJson({"set-interval", absl::StrCat(k)}).status());
    RETURN_IF_ERROR(
        c->WaitForAll([&](const json& l) { return l["refresh_interval"] == k; },
                      absl::Seconds(60)));
    apply_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  res->j["peers"]["set_interval_to_all_ranks_ms"] = apply_ms;
  return c->StopRanks(absl::Seconds(60));
}

absl::Status WithoutPeers(const Options& o, const std::string& dir,
                          Results* res) {
  ASSIGN_OR_RETURN(auto d, Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir,
                                        BenchGiftd(o)));
  testing_daemon::RankOptions ro;
  ro.job = "solobench";
  ro.world_size = 6;
  ro.step_sleep_ms = o.step_sleep_ms;
  ro.comm_timeout_s = 120;
  ro.extra_args = RankArgs(o);
  ASSIGN_OR_RETURN(auto g, RankGroup::Start(GIFT_BENCH_RANK_BIN, dir,
                                            d->agent_socket(), ro));
  if (!WaitFor([&] { return g->MinSteps() > 0; }, absl::Seconds(120))) {
    return absl::DeadlineExceededError("the ranks never stepped");
  }
  RETURN_IF_ERROR(PinAll(*d, o.layers));
  if (!WaitFor(
          [&] {
            return g->AllLast(
                [&](const json& l) { return l["gift_layers"] == o.layers; });
          },
          absl::Seconds(180), absl::Milliseconds(200))) {
    return absl::DeadlineExceededError("layers never on GIFT (no peers)");
  }
  std::vector<size_t> from;
  for (int r = 0; r < 6; ++r) from.push_back(g->Report(r).size());
  const int64_t want = g->MinSteps() + o.steps;
  if (!WaitFor([&] { return g->MinSteps() >= want; }, absl::Seconds(600))) {
    return absl::DeadlineExceededError("no peers: too slow");
  }
  std::vector<std::vector<json>> reps;
  for (int r = 0; r < 6; ++r) reps.push_back(g->Report(r));
  res->j["no_peers"] = {{"step_ms_median", StepMs(reps, from)}};
  return g->Stop(absl::Seconds(60));
}

void Print(const Options& o, const json& j) {
  const double grad = 4.0 * o.dim * o.dim;  // one rank's FP32 gradient
  const json& p = j["peers"];
  const int64_t n = p["refreshes"].get<int64_t>();
  std::cout << "peer_bench: 3 nodes x 2 ranks, " << o.layers << " layers "
            << o.dim << "x" << o.dim << ", r=" << o.rank
            << ", K=" << o.refresh_interval << "; "
            << p["mode"].get<std::string>() << "\n";
  std::cout << absl::StrFormat("%-40s %14s\n", "quantity", "value");
  std::cout << absl::StrFormat("%-40s %14d\n", "refreshes measured", n);
  for (const char* k : {"sketch", "factor"}) {
    if (!p["bytes_by_kind"].contains(k) || n == 0) {
      std::cout << absl::StrFormat(
          "%-40s %14s\n", absl::StrCat(k, " bytes / refresh / layer"), "n/a");
      continue;
    }
    const double b = p["bytes_by_kind"][k].get<double>() / n;
    std::cout << absl::StrFormat("%-40s %14.0f  (%.3f x one FP32 gradient)\n",
                                 absl::StrCat(k, " bytes / refresh / layer"), b,
                                 b / grad);
  }
  std::cout << absl::StrFormat(
      "%-40s %14.0f\n", "FP32 gradient bytes / layer / rank / step", grad);
  std::cout << absl::StrFormat("%-40s %14.3f\n", "step ms median, peers",
                               p["step_ms_median"].get<double>());
  std::cout << absl::StrFormat("%-40s %14.3f\n", "step ms median, one giftd",
                               j["no_peers"]["step_ms_median"].get<double>());
  std::vector<double> ms = p["set_interval_to_all_ranks_ms"];
  std::cout << absl::StrFormat("%-40s %14.1f\n",
                               "set-interval on follower -> all ranks, ms",
                               Median(ms));
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> o = Parse(argc, argv);
  if (!o.ok()) {
    std::cerr << "peer_bench: " << o.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> dir1 = testing_daemon::MakeTempDir("peer_bench");
  absl::StatusOr<std::string> dir2 = testing_daemon::MakeTempDir("peer_bench");
  if (!dir1.ok() || !dir2.ok()) return 1;
  Results res;
  absl::Status s = WithPeers(*o, *dir1, &res);
  if (s.ok()) s = WithoutPeers(*o, *dir2, &res);
  std::filesystem::remove_all(*dir2);
  if (!s.ok()) {
    std::cerr << "peer_bench: " << s << "\n";
    return 1;
  }
  Print(*o, res.j);
  if (!o->out.empty()) std::ofstream(o->out) << res.j.dump(1) << "\n";
  return 0;
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
