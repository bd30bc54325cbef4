// bench/allreduce_bench: bytes on the wire and step time of the quantized
// allreduce (fp8) against its fp32 / bf16 baselines and Gloo's own FP32
// allreduce, on W local rank processes (issue 3, DESIGN §7 "Volume").
//
// The launcher (no --rank) starts W copies of itself with --rank=r, each
// either directly (loopback, every rank on --hosts or 127.0.0.1) or, with
// --netns=PREFIX, inside network namespace PREFIX-r<r> through `ip netns exec`
// (scripts/netns.sh builds them; rank r's address is then 10.77.0.<r+1>
// unless --hosts says otherwise). The ranks rendezvous through a FileStore
// in a fresh temporary directory, which namespaces share. Rank 0 hands its
// figures back in a file; the launcher prints the table and writes --json.
// All ranks share this machine's cores: with fewer cores than ranks the fp8
// step (quantize, accumulate, GIFT whitening) is CPU-bound, so the time
// saving at a given rate understates that of one rank per host.
//
//   allreduce_bench [--sizes-mib=4,64,256] [--modes=fp8,fp32,bf16,gloo-fp32]
//   (also fp8+drift: fp8 with the audits' running sums, no audit step;
//    fp8+audit: fp8 with an audit every step; plain fp8 audits nothing)
//                   [--steps=N] [--warmup=1] [--world=4] [--hosts=h0,h1,...]
//                   [--netns=PREFIX] [--json=FILE] [--label=TEXT]
//                   [--deadline-s=900]
// --benchmark_* flags (from scripts/run-bench.sh) are accepted and ignored.
// Exit 0 on success, 1 when a rank fails, 2 on bad arguments.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/allreduce/bench_rank.h"
#include "bench/allreduce/bench_results.h"
#include "bench/allreduce/rank_launcher.h"
#include "common/testing.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kMaxWorld = 64;

struct Flags {
  std::map<std::string, std::string> values;

  std::string Get(const std::string& k, const std::string& def) const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
  }
};

// --key=value or --key value; --benchmark_* ignored.
bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (!absl::ConsumePrefix(&a, "--")) return false;
    if (absl::StartsWith(a, "benchmark_")) continue;
    const size_t eq = a.find('=');
    if (eq != absl::string_view::npos) {
      flags->values[std::string(a.substr(0, eq))] =
          std::string(a.substr(eq + 1));
    } else if (i + 1 < argc) {
      flags->values[std::string(a)] = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

bool ParseInts(const std::string& s, std::vector<int64_t>* out) {
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v) || v < 1 || v > 4096) return false;
    out->push_back(v);
  }
  return !out->empty();
}

bool ParseModes(const std::string& s, std::vector<std::string>* out) {
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    if (p != "fp8" && p != "fp32" && p != "bf16" && p != "gloo-fp32" &&
        p != "fp8+drift" && p != "fp8+audit") {
      return false;
    }
    out->emplace_back(p);
  }
  return !out->empty();
}

// The flags both roles share.
bool ParseCommon(const Flags& f, RankConfig* c) {
  return ParseInts(f.Get("sizes-mib", "4,64,256"), &c->sizes_mib) &&
         ParseModes(f.Get("modes", "fp8,fp32,bf16,gloo-fp32"), &c->modes) &&
         absl::SimpleAtoi(f.Get("steps", "0"), &c->steps) && c->steps >= 0 &&
         c->steps <= 10000 &&
         absl::SimpleAtoi(f.Get("warmup", "1"), &c->warmup) && c->warmup >= 0 &&
         c->warmup <= 100 &&
         absl::SimpleAtoi(f.Get("world", "4"), &c->world_size) &&
         c->world_size >= 1 && c->world_size <= kMaxWorld;
}

int RankMain(const Flags& f, RankConfig c) {
  if (!absl::SimpleAtoi(f.Get("rank", ""), &c.rank) || c.rank < 0 ||
      c.rank >= c.world_size) {
    return kExitUsage;
  }
  c.store_dir = f.Get("store", "");
  c.result_path = f.Get("result", "");
  c.host = f.Get("host", "127.0.0.1");
  const absl::Status s = RunBenchRank(c);
  if (!s.ok()) {
    std::cerr << "allreduce_bench rank " << c.rank << ": " << s << std::endl;
    return kExitFailed;
  }
  return 0;
}

// Per-rank hosts: --hosts (one for all, or one per rank), else the netns
// addresses, else loopback.
bool RankHosts(const Flags& f, int world, std::vector<std::string>* hosts) {
  std::vector<std::string> given =
      absl::StrSplit(f.Get("hosts", ""), ',', absl::SkipEmpty());
  for (int r = 0; r < world; ++r) {
    if (given.size() == 1) {
      hosts->push_back(given[0]);
    } else if (!given.empty()) {
      if (given.size() != size_t(world)) return false;
      hosts->push_back(given[r]);
    } else if (!f.Get("netns", "").empty()) {
      hosts->push_back(absl::StrCat("10.77.0.", r + 1));
    } else {
      hosts->push_back("127.0.0.1");
    }
  }
  return true;
}

std::string ConfigJson(const Flags& f, const RankConfig& c,
                       const std::vector<std::string>& hosts) {
  nlohmann::json j = {{"world", c.world_size},
                      {"sizes_mib", c.sizes_mib},
                      {"modes", c.modes},
                      {"steps", c.steps},
                      {"warmup", c.warmup},
                      {"hosts", hosts},
                      {"netns", f.Get("netns", "")},
                      {"label", f.Get("label", "")}};
  return j.dump();
}

std::vector<std::string> RankArgv(const Flags& f, const RankConfig& c, int r,
                                  const std::string& self,
                                  const std::string& dir,
                                  const std::string& host) {
  std::vector<std::string> argv;
  const std::string ns = f.Get("netns", "");
  if (!ns.empty()) argv = {"ip", "netns", "exec", absl::StrCat(ns, "-r", r)};
  argv.insert(
      argv.end(),
      {self, absl::StrCat("--rank=", r), absl::StrCat("--world=", c.world_size),
       absl::StrCat("--sizes-mib=", absl::StrJoin(c.sizes_mib, ",")),
       absl::StrCat("--modes=", absl::StrJoin(c.modes, ",")),
       absl::StrCat("--steps=", c.steps), absl::StrCat("--warmup=", c.warmup),
       "--store=" + dir + "/store", "--result=" + dir + "/result.tsv",
       "--host=" + host});
  return argv;
}

absl::StatusOr<std::vector<ModeResult>> ReadResults(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("rank 0 wrote no results");
  std::vector<ModeResult> rows;
  std::string line;
  while (std::getline(in, line)) {
    absl::StatusOr<ModeResult> r = FromLine(line);
    if (!r.ok()) return r.status();
    rows.push_back(*r);
  }
  return rows;
}

int LauncherMain(const Flags& f, const RankConfig& c) {
  std::vector<std::string> hosts;
  int deadline_s = 0;
  if (!RankHosts(f, c.world_size, &hosts) ||
      !absl::SimpleAtoi(f.Get("deadline-s", "900"), &deadline_s) ||
      deadline_s < 1) {
    std::cerr << "allreduce_bench: bad --hosts or --deadline-s" << std::endl;
    return kExitUsage;
  }
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec);
  absl::StatusOr<std::string> made = gift::testing::MakeTempDir("gift_arbench");
  if (ec || !made.ok()) {
    std::cerr << "allreduce_bench: cannot set up the run" << std::endl;
    return kExitFailed;
  }
  const std::string dir = *std::move(made);
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < c.world_size; ++r) {
    argvs.push_back(RankArgv(f, c, r, self, dir, hosts[r]));
  }
  std::cout << "allreduce_bench: " << c.world_size << " ranks on "
            << absl::StrJoin(hosts, ",")
            << (f.Get("netns", "").empty()
                    ? ""
                    : " (netns " + f.Get("netns", "") + "-r*)")
            << std::endl;
  auto exits = LaunchRanks(argvs, absl::Seconds(deadline_s));
  absl::StatusOr<std::vector<ModeResult>> rows =
      exits.ok() ? ReadResults(dir + "/result.tsv") : exits.status();
  std::filesystem::remove_all(dir, ec);
  for (const RankExit& e : exits.ok() ? *exits : std::vector<RankExit>{}) {
    if (e.exit_code != 0) {
      std::cerr << "allreduce_bench: " << DescribeExits(*exits) << std::endl;
      return kExitFailed;
    }
  }
  if (!rows.ok()) {
    std::cerr << "allreduce_bench: " << rows.status() << std::endl;
    return kExitFailed;
  }
  std::cout << "\nallreduce_bench " << f.Get("label", "")
            << " (W = " << c.world_size
            << "; bytes = payload per rank per step; times = median/p90 over "
               "steps of the max over ranks)\n"
            << FormatTable(*rows);
  const std::string json = f.Get("json", "");
  if (!json.empty()) {
    const absl::Status s = WriteJson(json, ConfigJson(f, c, hosts), *rows);
    if (!s.ok()) {
      std::cerr << "allreduce_bench: " << s << std::endl;
      return kExitFailed;
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  Flags f;
  RankConfig c;
  if (!ParseFlags(argc, argv, &f) || !ParseCommon(f, &c)) {
    std::cerr << "allreduce_bench: bad arguments (see the header of "
                 "bench/allreduce/allreduce_bench.cc)"
              << std::endl;
    return kExitUsage;
  }
  return f.values.count("rank") ? RankMain(f, c) : LauncherMain(f, c);
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
