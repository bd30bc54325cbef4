// daemon_bench: is the factor refresh off the critical path (DESIGN §7:
// "factor refresh running in the daemon changes the client's step time p99
// by <= 2%")? Starts giftd and `--ranks` daemon_bench_rank processes (Gloo,
// `--layers` d × d layers, all pinned onto the GIFT path at rank r), then
// runs alternating phases side by side in the same processes:
//   refresh   K = --refresh-interval (windows close, the daemon refreshes
//             and publishes factors, the ranks switch factors);
//   disabled  K = 1000000 (the same sketching and whitening every step, no
//             refresh),
// each `--steps-per-phase` steps after `--warmup` steps of settling. Reports
// the p50/p99 step time of each mode and their ratio, and giftd's CPU time
// (utime + stime from /proc/PID/stat) and resident memory (VmRSS, VmHWM)
// per rank and per selected layer. Prints a table; --out FILE writes JSON.
// Figures, no assertions: exit 0 unless the run itself fails.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"
#include "tests/daemon/rank_testutil.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;
using testing_daemon::Giftd;
using testing_daemon::RankGroup;
using testing_daemon::WaitFor;

constexpr int kDisabledK = 1000000;

struct Options {
  std::string out;
  int ranks = 2, layers = 4, dim = 1024, rank = 32;
  int phases = 4, steps_per_phase = 60, warmup = 6;
  int step_sleep_ms = 10, refresh_interval = 5;
  bool keep_dir = false;
};

absl::StatusOr<Options> ParseOptions(int argc, char** argv) {
  Options o;
  absl::Status s =
      testing_daemon::ParseFlagsInto(argc, argv,
                                     {{"out", &o.out},
                                      {"ranks", &o.ranks},
                                      {"layers", &o.layers},
                                      {"dim", &o.dim},
                                      {"rank", &o.rank},
                                      {"phases", &o.phases},
                                      {"steps-per-phase", &o.steps_per_phase},
                                      {"warmup", &o.warmup},
                                      {"step-sleep-ms", &o.step_sleep_ms},
                                      {"refresh-interval", &o.refresh_interval},
                                      {"keep-dir", &o.keep_dir}});
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        s.message(),
        "\nusage: daemon_bench [--out FILE] [--ranks 2] [--layers 4] "
        "[--dim 1024] [--rank 32] [--phases 4] [--steps-per-phase 60] "
        "[--warmup 6] [--step-sleep-ms 10] [--refresh-interval 5] "
        "[--keep-dir]"));
  }
  if (o.ranks < 1 || o.layers < 1 || o.phases < 2 || o.steps_per_phase < 1) {
    return absl::InvalidArgumentError("ranks, layers >= 1, phases >= 2");
  }
  return o;
}

double DaemonCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string s((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::vector<std::string> f;  // fields from 3 (state) on
  for (std::string x; rest >> x;) f.push_back(x);
  if (f.size() < 13) return 0;
  // utime and stime are fields 14 and 15 (1-based): f[11], f[12].
  return (std::stod(f[11]) + std::stod(f[12])) / ::sysconf(_SC_CLK_TCK);
}

// A "VmRSS:  1234 kB" line of /proc/PID/status, in MiB.
double StatusMiB(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::stod(line.substr(key.size() + 1)) / 1024.0;
    }
  }
  return 0;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5));
  return v[i];
}

struct Phase {
  bool refresh = false;
  int k = 0;
  int64_t epoch = 0;
  // Per rank, the report lines written before the phase began: a phase's
  // steps come after them and on its epoch or a later one (set-interval to
  // the K in force returns the current epoch, which began long before).
  std::vector<size_t> first_line;
  double daemon_cpu_s = 0, wall_s = 0;
  std::vector<double> step_ms;
  // The same steps split by whether a factor switch (the client's residual
  // re-projection) happened in them.
  std::vector<double> switch_ms, steady_ms;
};

// Does line `i` of a rank's report belong to phase `p` (or a later one)?
bool InPhase(const Phase& p, int rank, size_t i, const json& line) {
  return i >= p.first_line[rank] && line["epoch"].get<int64_t>() >= p.epoch;
}

int64_t StepsIn(const Phase& p, int rank, const std::vector<json>& rep) {
  int64_t n = 0;
  for (size_t i = 0; i < rep.size(); ++i) n += InPhase(p, rank, i, rep[i]);
  return n;
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {}

  absl::Status Setup(const std::string& dir) {
    testing_daemon::GiftdConfig c;
    c.refresh_interval = o_.refresh_interval;
    c.staleness_limit = 100000000;  // the disabled phase must keep factors
    c.rank = o_.rank;
    c.top_k = o_.layers;
    c.min_gain = 0;
    c.probe_interval = 1000;
    c.poll_interval_ms = 20;
    c.rank_timeout_ms = 30000;
    c.log_level = "warning";
    ASSIGN_OR_RETURN(giftd_,
                     Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir, c));
    testing_daemon::RankOptions ro;
    ro.job = "bench";
    ro.world_size = o_.ranks;
    ro.step_sleep_ms = o_.step_sleep_ms;
    ro.comm_timeout_s = 120;
    ro.extra_args = {absl::StrCat("--layers=", o_.layers),
                     absl::StrCat("--dim=", o_.dim)};
    ASSIGN_OR_RETURN(ranks_, RankGroup::Start(GIFT_BENCH_RANK_BIN, dir,
                                              giftd_->agent_socket(), ro));
    if (!WaitFor([&] { return LayerCount() == o_.layers; }, absl::Seconds(120),
                 absl::Milliseconds(200))) {
      return absl::DeadlineExceededError("the ranks never registered");
    }
    for (int l = 0; l < o_.layers; ++l) {
      ASSIGN_OR_RETURN(json r,
                       giftd_->CtlJson({"pin", absl::StrCat("layer", l)}));
    }
    if (!WaitFor([&] { return AllRanksGift(); }, absl::Seconds(180),
                 absl::Milliseconds(100))) {
      return absl::DeadlineExceededError(
          "the pinned layers never reached the GIFT path on every rank");
    }
    return absl::OkStatus();
  }

  absl::Status RunPhases() {
    for (int p = 0; p < o_.phases; ++p) {
      Phase ph;
      ph.refresh = p % 2 == 0;
      ph.k = ph.refresh ? o_.refresh_interval : kDisabledK;
      for (int r = 0; r < o_.ranks; ++r) {
        ph.first_line.push_back(ranks_->Report(r).size());
      }
      const double cpu0 = DaemonCpuSeconds(giftd_->pid());
      const absl::Time t0 = absl::Now();
      ASSIGN_OR_RETURN(json set,
                       giftd_->CtlJson({"set-interval", absl::StrCat(ph.k)}));
      ph.epoch = testing_daemon::Int(set, "plan_epoch");
      const int64_t want = o_.warmup + o_.steps_per_phase;
      if (!WaitFor(
              [&] {
                for (int r = 0; r < o_.ranks; ++r) {
                  if (StepsIn(ph, r, ranks_->Report(r)) < want) {
                    return false;
                  }
                }
                return true;
              },
              absl::Minutes(5), absl::Milliseconds(50))) {
        return absl::DeadlineExceededError(
            absl::StrCat("phase ", p, " did not complete"));
      }
      ph.daemon_cpu_s = DaemonCpuSeconds(giftd_->pid()) - cpu0;
      ph.wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
      phases_.push_back(ph);
      std::cerr << "phase " << p << (ph.refresh ? " refresh" : " disabled")
                << " done\n";
    }
    rss_mib_ = StatusMiB(giftd_->pid(), "VmRSS");
    hwm_mib_ = StatusMiB(giftd_->pid(), "VmHWM");
    return ranks_->Stop(absl::Seconds(60));
  }

  // Assigns every report line to its phase, drops each phase's
  // first `warmup` steps per rank and lines not fully on the GIFT path.
  void Collect() {
    for (int r = 0; r < o_.ranks; ++r) {
      std::vector<int> seen(phases_.size(), 0);
      const std::vector<json> rep = ranks_->Report(r);
      for (size_t i = 0; i < rep.size(); ++i) {
        const json& l = rep[i];
        int p = -1;
        for (size_t k = 0; k < phases_.size(); ++k) {
          if (InPhase(phases_[k], r, i, l)) p = static_cast<int>(k);
        }
        if (p < 0 || ++seen[p] <= o_.warmup) continue;
        if (seen[p] > o_.warmup + o_.steps_per_phase) continue;
        if (l["gift_layers"] != o_.layers ||
            l["refresh_interval"] != phases_[p].k) {
          ++dropped_;
          continue;
        }
        const double ms = l["step_ms"].get<double>();
        phases_[p].step_ms.push_back(ms);
        (l["factor_switches"].get<int>() > 0 ? phases_[p].switch_ms
                                             : phases_[p].steady_ms)
            .push_back(ms);
      }
    }
  }

  json Results() const {
    std::vector<double> on, off, on_steady, on_switch;
    double cpu_on = 0, cpu_off = 0;
    size_t steps_on = 0, steps_off = 0;
    for (const Phase& p : phases_) {
      auto& v = p.refresh ? on : off;
      v.insert(v.end(), p.step_ms.begin(), p.step_ms.end());
      if (p.refresh) {
        on_steady.insert(on_steady.end(), p.steady_ms.begin(),
                         p.steady_ms.end());
        on_switch.insert(on_switch.end(), p.switch_ms.begin(),
                         p.switch_ms.end());
      }
      (p.refresh ? cpu_on : cpu_off) += p.daemon_cpu_s;
      (p.refresh ? steps_on : steps_off) += o_.warmup + o_.steps_per_phase;
    }
    const double p99_off = Percentile(off, 0.99);
    const double p50_off = Percentile(off, 0.5);
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
    json r = {{"config", Config()},
              {"refresh", Summary(on, cpu_on)},
              {"refresh_without_switch_steps", Summary(on_steady, cpu_on)},
              {"factor_switch_steps", Summary(on_switch, cpu_on)},
              {"disabled", Summary(off, cpu_off)},
              {"p99_ratio", ratio(Percentile(on, 0.99), p99_off)},
              {"p50_ratio", ratio(Percentile(on, 0.5), p50_off)},
              {"p99_ratio_without_switch_steps",
               ratio(Percentile(on_steady, 0.99), p99_off)},
              {"dropped_samples", dropped_}};
    const double cpu_per_step = cpu_on / std::max<size_t>(1, steps_on);
    r["daemon"] = {
        {"rss_mib", rss_mib_},
        {"peak_rss_mib", hwm_mib_},
        {"rss_mib_per_rank", rss_mib_ / o_.ranks},
        {"rss_mib_per_layer", rss_mib_ / o_.layers},
        {"cpu_ms_per_step_refresh", 1e3 * cpu_per_step},
        {"cpu_ms_per_step_disabled",
         1e3 * cpu_off / std::max<size_t>(1, steps_off)},
        {"cpu_ms_per_step_per_rank", 1e3 * cpu_per_step / o_.ranks},
        {"cpu_ms_per_step_per_layer", 1e3 * cpu_per_step / o_.layers}};
    return r;
  }

 private:
  static json Summary(const std::vector<double>& ms, double daemon_cpu_s) {
    return {{"samples", ms.size()},
            {"p50_ms", Percentile(ms, 0.5)},
            {"p99_ms", Percentile(ms, 0.99)},
            {"daemon_cpu_s", daemon_cpu_s}};
  }

  json Config() const {
    return {{"ranks", o_.ranks},
            {"layers", o_.layers},
            {"dim", o_.dim},
            {"rank", o_.rank},
            {"refresh_interval", o_.refresh_interval},
            {"phases", o_.phases},
            {"steps_per_phase", o_.steps_per_phase},
            {"warmup", o_.warmup},
            {"step_sleep_ms", o_.step_sleep_ms}};
  }

  int LayerCount() {
    absl::StatusOr<json> j = giftd_->CtlJson({"layers"});
    return j.ok() ? static_cast<int>(testing_daemon::Field(*j, "layers").size())
                  : -1;
  }

  bool AllRanksGift() {
    for (int r = 0; r < o_.ranks; ++r) {
      const std::vector<json> rep = ranks_->Report(r);
      if (rep.empty() || rep.back()["gift_layers"] != o_.layers) return false;
    }
    return true;
  }

  const Options o_;
  std::unique_ptr<Giftd> giftd_;
  std::unique_ptr<RankGroup> ranks_;
  std::vector<Phase> phases_;
  double rss_mib_ = 0, hwm_mib_ = 0;
  int64_t dropped_ = 0;
};

void PrintTable(const json& r) {
  std::printf("%-30s %8s %10s %10s\n", "steps", "samples", "p50 ms", "p99 ms");
  for (const char* m : {"refresh", "refresh_without_switch_steps",
                        "factor_switch_steps", "disabled"}) {
    std::printf("%-30s %8d %10.3f %10.3f\n", m, r[m]["samples"].get<int>(),
                r[m]["p50_ms"].get<double>(), r[m]["p99_ms"].get<double>());
  }
  std::printf(
      "p99 ratio refresh/disabled: %.4f (target <= 1.02); p50 ratio %.4f; "
      "p99 ratio without the factor-switch steps %.4f\n",
      r["p99_ratio"].get<double>(), r["p50_ratio"].get<double>(),
      r["p99_ratio_without_switch_steps"].get<double>());
  const json& d = r["daemon"];
  std::printf(
      "giftd: RSS %.1f MiB (peak %.1f) = %.1f MiB per rank, %.1f MiB per "
      "selected layer; CPU %.3f ms per step while refreshing (%.3f per rank, "
      "%.3f per layer), %.3f ms per step disabled\n",
      d["rss_mib"].get<double>(), d["peak_rss_mib"].get<double>(),
      d["rss_mib_per_rank"].get<double>(), d["rss_mib_per_layer"].get<double>(),
      d["cpu_ms_per_step_refresh"].get<double>(),
      d["cpu_ms_per_step_per_rank"].get<double>(),
      d["cpu_ms_per_step_per_layer"].get<double>(),
      d["cpu_ms_per_step_disabled"].get<double>());
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> o = ParseOptions(argc, argv);
  if (!o.ok()) {
    std::cerr << "daemon_bench: " << o.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> dir = testing_daemon::MakeTempDir("daemon_bench");
  if (!dir.ok()) return 1;
  Bench bench(*o);
  absl::Status s = bench.Setup(*dir);
  if (s.ok()) s = bench.RunPhases();
  if (!s.ok()) {
    std::cerr << "daemon_bench: " << s << "\n(files in " << *dir << ")\n";
    return 1;
  }
  bench.Collect();
  const json r = bench.Results();
  PrintTable(r);
  if (!o->out.empty()) std::ofstream(o->out) << r.dump(2) << "\n";
  if (!o->keep_dir) std::filesystem::remove_all(*dir);
  return 0;
}

}  // namespace
}  // namespace gift::bench

int main(int argc, char** argv) { return gift::bench::Main(argc, argv); }
