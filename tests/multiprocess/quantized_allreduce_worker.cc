// One rank of the quantized-allreduce multi-process tests, launched by
// RunRanks (quantized_allreduce_multiprocess_test.cc).
// Usage: quantized_allreduce_worker SCENARIO [TIMEOUT_MS]
//
//   suite        fp8 steps on a mixed bucket (Euclidean E4M3/E5M2, per-layer
//                and block scales, low-rank and full GIFT layers, empty and
//                one-element layers, gaps, 1 MiB pieces): error bounds, a
//                NaN/Inf step, ranks given different factor versions, then
//                fp32. Reports "hash=..." of every step's bucket.
//   mismatch     the last rank builds a different plan: every rank must fail
//                creation with the plan-mismatch error.
//   drift        W = 4, the committed 10-step fc2 runs cycled 5 times: reports
//                the running-sum drift with and without error feedback and
//                on the Euclidean path.
//   large        a 257 MiB bucket with the default 256 MiB piece size.
//   fp4          nvfp4 and mxfp4 layers with error feedback
//                (allreduce_fp4.h).
//   peer_exits / peer_stalls  the last rank dies / sleeps during a Run (with
//                _mid: after taking part in its agreement, so the others
//                wait inside the FP8 phases); the
//                others report "code=C elapsed_ms=T" and exit 100 + C.
// Exit 0 when every check passes, 1 on a failed check, 2 on setup errors.
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/agreement.h"
#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/transport_factory.h"
#include "tests/multiprocess/allreduce_check.h"
#include "tests/multiprocess/allreduce_drift.h"
#include "tests/multiprocess/allreduce_fp4.h"
#include "tests/multiprocess/harness.h"
#include "tests/multiprocess/rank_checker.h"

namespace gift::multiprocess {
namespace {

using client::AllReduceEngine;
using client::AllReduceEngineOptions;
using client::BucketLayer;
using client::EpochPlan;
using client::LayerPath;
using client::StepTelemetry;
using client::Transport;
using client::VersionedFactors;

constexpr int kExitCheckFailed = 1;
constexpr int kExitSetup = 2;
constexpr int kExitStatusBase = 100;

using Checker = gift::testing::RankChecker;

EpochPlan SuitePlan(bool variant) {
  const auto e5 = kernels::Fp8Format::kE5M2;
  std::vector<BucketLayer> l = {
      {.name = "e4", .shape = {301, 517}, .offset = 0},
      {.name = "empty", .shape = {0, 5}, .offset = 155617},
      {.name = "one", .shape = {1}, .offset = 155620},
      {.name = "g_low",
       .shape = {192, 128},
       .offset = 155621,
       .path = LayerPath::kGift},
      {.name = "e5blk",
       .shape = {100003},
       .offset = 180197,
       .format = e5,
       .block_size = variant ? 999 : 1000},
      {.name = "g_full",
       .shape = {64, 96},
       .offset = 280200,
       .path = LayerPath::kGift,
       .transform = client::GiftTransform::kFull},
      {.name = "e4blk",
       .shape = {150001},
       .offset = 286349,
       .block_size = 4096},
  };
  return *EpochPlan::Create(1, 436352, std::move(l));
}

void CheckGaps(Checker& check, const EpochPlan& plan, const float* x) {
  int64_t end = 0, bad = 0;
  auto gap = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) bad += x[i] != GapValue(i);
  };
  for (const BucketLayer& s : plan.layers()) {
    gap(end, s.offset);
    end = s.offset + s.size();
  }
  gap(end, plan.bucket_elements());
  check.Expect(bad == 0, absl::StrCat(bad, " gap elements were written"));
}

void CheckAllNan(Checker& check, const BucketLayer& s, const float* x) {
  int64_t bad = 0;
  for (int64_t i = 0; i < s.size(); ++i) bad += !std::isnan(x[s.offset + i]);
  check.Expect(bad == 0, absl::StrCat(s.name, ": ", bad, " elements not NaN"));
}

void CheckFinite(Checker& check, const BucketLayer& s, const float* x) {
  int64_t bad = 0;
  for (int64_t i = 0; i < s.size(); ++i) bad += !std::isfinite(x[s.offset + i]);
  check.Expect(bad == 0, absl::StrCat(s.name, ": ", bad, " non-finite"));
}

void ExpectPath(Checker& check, const StepTelemetry& t, int layer,
                LayerPath path, int64_t version) {
  const client::LayerTelemetry& l = t.layers[layer];
  check.Expect(
      l.path == path && l.factor_version == version,
      absl::StrCat("step ", t.step, " layer ", l.name, ": path ",
                   client::LayerPathName(l.path), " version ", l.factor_version,
                   ", want ", client::LayerPathName(path), " ", version));
}

int RunSuite(Transport& comm, const RankEnv& env) {
  Checker check(comm.rank());
  const int w = comm.world_size(), me = comm.rank();
  const EpochPlan plan = SuitePlan(false);
  AllReduceEngineOptions o;
  o.piece_bytes = 1 << 20;  // 436k elements: two pieces
  auto ar = AllReduceEngine::Create(&comm, plan, o);
  if (!ar.ok()) return kExitSetup;
  VersionedFactors f;
  const client::LayerFactor low1 = client::SyntheticLowRank(1, 128, 16, 11);
  const client::LayerFactor full1 = client::SyntheticFull(1, 96, 12);
  check.ExpectOk(f.Put("g_low", low1), "put");
  check.ExpectOk(f.Put("g_full", full1), "put");
  std::vector<float> x(plan.bucket_elements());
  std::string hashes;
  StepTelemetry t;
  int64_t nonzero = 0;
  auto run = [&](int step) {
    FillBucket(plan, me, step, x.data());
    check.ExpectOk((*ar)->Run(x.data(), f, &t), absl::StrCat("Run ", step));
    CheckGaps(check, plan, x.data());
    absl::StrAppend(&hashes, HashHex(x.data(), x.size()), ",");
  };
  // Step 0: fresh, every rank holds version 1 of both factors.
  run(0);
  for (int l : {0, 2, 4, 6}) {
    check.ExpectEmpty(CheckEuclidLayer(plan, l, w, 0, x.data(), &nonzero));
  }
  check.Expect(nonzero > 0, "no quantization error at all: not quantized?");
  check.ExpectEmpty(CheckGiftLayer(plan, 3, low1, w, 0, x.data()));
  check.ExpectEmpty(CheckGiftLayer(plan, 5, full1, w, 0, x.data()));
  ExpectPath(check, t, 3, LayerPath::kGift, 1);
  // Payload: about a ring allreduce of 1-byte elements plus the scales, at
  // most 25.5% of the FP32 ring's 2 (W-1)/W · 4 bytes per element.
  const double fp32_ring =
      2.0 * (w - 1) / w * 4.0 * double(plan.communicated_elements());
  check.Expect(t.bytes_euclid + t.bytes_gift <= 0.255 * fp32_ring,
               absl::StrCat("payload ", t.bytes_euclid + t.bytes_gift,
                            " bytes vs FP32 ring ", fp32_ring));
  check.Expect(t.bytes_euclid + t.bytes_gift >= 0.24 * fp32_ring,
               "payload far below a 1-byte ring: bytes not counted?");
  // Step 1: NaN in e4blk on the last rank, +Inf in "one" on rank 0.
  FillBucket(plan, me, 1, x.data());
  if (me == w - 1) x[plan.layers()[6].offset + 77777] = std::nanf("");
  if (me == 0) x[plan.layers()[2].offset] = INFINITY;
  check.ExpectOk((*ar)->Run(x.data(), f, &t), "Run NaN step");
  absl::StrAppend(&hashes, HashHex(x.data(), x.size()), ",");
  CheckAllNan(check, plan.layers()[6], x.data());
  CheckAllNan(check, plan.layers()[2], x.data());
  for (int l : {0, 4}) {
    check.ExpectEmpty(CheckEuclidLayer(plan, l, w, 1, x.data(), &nonzero));
  }
  for (int l : {3, 5}) CheckFinite(check, plan.layers()[l], x.data());
  check.Expect(t.nonfinite_layers == 2, "nonfinite_layers != 2");
  // Step 2: g_low: the last rank lacks version 2 -> all use 1; g_full: rank
  // 0 is ahead ({2, 3}), the others hold {1, 2} -> all switch to 2.
  if (me < w - 1)
    check.ExpectOk(f.Put("g_low", client::SyntheticLowRank(2, 128, 16, 21)),
                   "put");
  check.ExpectOk(f.Put("g_full", client::SyntheticFull(2, 96, 22)), "put");
  if (me == 0)
    check.ExpectOk(f.Put("g_full", client::SyntheticFull(3, 96, 23)), "put");
  run(2);
  ExpectPath(check, t, 3, LayerPath::kGift, 1);
  ExpectPath(check, t, 5, LayerPath::kGift, 2);
  // Step 3: g_low: the others moved on to {2, 3}, the last rank still has
  // only 1 -> nobody holds the minimum: Euclidean everywhere this step.
  if (me < w - 1)
    check.ExpectOk(f.Put("g_low", client::SyntheticLowRank(3, 128, 16, 31)),
                   "put");
  run(3);
  ExpectPath(check, t, 3, LayerPath::kEuclid, client::kNoVersion);
  check.ExpectEmpty(CheckEuclidLayer(plan, 3, w, 3, x.data(), &nonzero));
  // Step 4: the fp32 baseline on the same communicator.
  o.mode = client::AllReduceMode::kFp32;
  auto fp32 = AllReduceEngine::Create(&comm, plan, o);
  check.ExpectOk(fp32.status(), "create fp32");
  if (!fp32.ok()) return kExitCheckFailed;
  FillBucket(plan, me, 4, x.data());
  check.ExpectOk((*fp32)->Run(x.data(), f, &t), "Run fp32");
  CheckGaps(check, plan, x.data());
  for (size_t l = 0; l < plan.layers().size(); ++l) {
    const BucketLayer& s = plan.layers()[l];
    int64_t bad = 0;
    for (int64_t i = 0; i < s.size(); ++i) {
      double mean = 0, mag = 0;
      for (int p = 0; p < w; ++p) {
        mean += GradValue(p, l, 4, i) / double(w);
        mag += std::abs(GradValue(p, l, 4, i)) / double(w);
      }
      bad += !(std::abs(x[s.offset + i] - mean) <= 1e-6 * mag);
    }
    check.Expect(bad == 0, absl::StrCat("fp32 ", s.name, ": ", bad, " off"));
  }
  absl::StrAppend(&hashes, HashHex(x.data(), x.size()));
  (void)WriteRankReport(env, absl::StrCat("hash=", hashes));
  return check.exit_code();
}

int RunMismatch(Transport& comm, const RankEnv& env) {
  const bool variant = comm.rank() == comm.world_size() - 1;
  auto ar = AllReduceEngine::Create(&comm, SuitePlan(variant), {});
  (void)WriteRankReport(env, ar.status().ToString());
  const bool ok = ar.status().code() == absl::StatusCode::kFailedPrecondition &&
                  absl::StrContains(ar.status().message(),
                                    "bucket plan mismatch across ranks (this "
                                    "rank's fingerprint");
  return ok ? 0 : kExitCheckFailed;
}

int RunLarge(Transport& comm, const RankEnv& env) {
  Checker check(comm.rank());
  const int64_t n = int64_t{257} << 18;  // 257 MiB of floats
  const EpochPlan plan =
      *EpochPlan::Create(1, n,
                         {{.name = "big", .shape = {n - 4096}, .offset = 0},
                          {.name = "g",
                           .shape = {32, 128},
                           .offset = n - 4096,
                           .path = LayerPath::kGift}});
  auto ar = AllReduceEngine::Create(&comm, plan, {});
  if (!ar.ok()) return kExitSetup;
  VersionedFactors f;
  const client::LayerFactor g = client::SyntheticLowRank(1, 128, 8, 3);
  check.ExpectOk(f.Put("g", g), "put");
  std::vector<float> x(n);
  FillBucket(plan, comm.rank(), 0, x.data());
  check.ExpectOk((*ar)->Run(x.data(), f, nullptr), "Run");
  int64_t nonzero = 0;
  check.ExpectEmpty(
      CheckEuclidLayer(plan, 0, comm.world_size(), 0, x.data(), &nonzero));
  check.Expect(nonzero > 0, "no quantization error");
  check.ExpectEmpty(CheckGiftLayer(plan, 1, g, comm.world_size(), 0, x.data()));
  (void)WriteRankReport(env, absl::StrCat("hash=", HashHex(x.data(), n)));
  return check.exit_code();
}

// mid: the victim first takes part in the step's agreement (the vector Run
// would send), so that the others are inside the FP8 phases when it goes.
int RunPeerFailure(Transport& comm, const RankEnv& env, bool stall, bool mid,
                   absl::Duration timeout) {
  const EpochPlan plan = SuitePlan(false);
  auto ar = AllReduceEngine::Create(&comm, plan, {});
  if (!ar.ok()) return kExitSetup;
  VersionedFactors f;
  (void)f.Put("g_low", client::SyntheticLowRank(1, 128, 16, 11));
  std::vector<float> x(plan.bucket_elements());
  FillBucket(plan, comm.rank(), 0, x.data());
  if (!(*ar)->Run(x.data(), f, nullptr).ok()) return kExitSetup;
  if (comm.rank() == comm.world_size() - 1) {
    if (mid) {
      // The step's agreement as AllReduceEngine sends it: the epoch, a
      // slot per layer, and the two audit slots (none wanted).
      std::vector<std::vector<int64_t>> held(1 + plan.layers().size() + 2);
      held[0] = {plan.epoch()};
      held[1 + plan.FindLayer("g_low")] = {1};
      if (!client::AgreeOnVersions(comm, held).ok()) return kExitSetup;
    }
    if (!stall) ::_exit(0);  // a crash: no destructors, sockets reset
    absl::SleepFor(timeout + absl::Milliseconds(1500));
    return 0;
  }
  const absl::Time start = absl::Now();
  const absl::Status s = (*ar)->Run(x.data(), f, nullptr);
  const absl::Duration elapsed = absl::Now() - start;
  std::cerr << "rank " << comm.rank() << ": Run after peer failure: " << s
            << std::endl;
  (void)WriteRankReport(
      env, absl::StrCat("code=", static_cast<int>(s.code()),
                        " elapsed_ms=", absl::ToInt64Milliseconds(elapsed)));
  return s.ok() ? kExitCheckFailed
                : kExitStatusBase + static_cast<int>(s.code());
}

int Main(int argc, char** argv) {
  if (argc < 2) return kExitSetup;
  const std::string scenario = argv[1];
  int timeout_ms = 10000;
  if (argc > 2 && !absl::SimpleAtoi(argv[2], &timeout_ms)) return kExitSetup;
  absl::StatusOr<RankEnv> env = RankEnvFromEnvironment();
  if (!env.ok()) return kExitSetup;
  auto store = client::FileStore::Create(env->store_dir);
  if (!store.ok()) return kExitSetup;
  client::TransportOptions options;
  options.rank = env->rank;
  options.world_size = env->world_size;
  options.store = store->get();
  options.timeout = absl::Seconds(30);  // rendezvous on a loaded machine
  auto comm = client::CreateTransport(options);
  if (!comm.ok()) {
    std::cerr << "rank " << env->rank << ": " << comm.status() << std::endl;
    return kExitSetup;
  }
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  if (!(*comm)->SetTimeout(timeout).ok()) return kExitSetup;
  if (scenario == "suite") return RunSuite(**comm, *env);
  if (scenario == "mismatch") return RunMismatch(**comm, *env);
  if (scenario == "large") return RunLarge(**comm, *env);
  if (scenario == "drift") return RunDrift(**comm, *env);
  if (scenario == "fp4") return RunFp4(**comm, *env);
  for (bool mid : {false, true}) {
    const std::string suffix = mid ? "_mid" : "";
    if (scenario == "peer_exits" + suffix) {
      return RunPeerFailure(**comm, *env, false, mid, timeout);
    }
    if (scenario == "peer_stalls" + suffix) {
      return RunPeerFailure(**comm, *env, true, mid, timeout);
    }
  }
  std::cerr << "unknown scenario " << scenario << std::endl;
  return kExitSetup;
}

}  // namespace
}  // namespace gift::multiprocess

int main(int argc, char** argv) { return gift::multiprocess::Main(argc, argv); }
