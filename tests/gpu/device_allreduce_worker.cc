// One rank of the device-allreduce tests (device_allreduce_test.cc),
// launched by RunRanks; every rank uses CUDA device 0.
// Usage: device_allreduce_worker
//
// Each rank builds a Gloo communicator (host path) and an NCCL communicator
// (device path) and runs the same steps through both on the same inputs:
//   fp8       4 steps on a mixed bucket (E4M3 / E5M2, per-layer and block
//             scales, low-rank and full GIFT layers, empty and one-element
//             layers, gaps, 256 KiB pieces): step 1 has a NaN and an Inf,
//             step 2 switches both GIFT factors (residual re-projection).
//             Euclidean layers must equal the host result bit for bit (and
//             their counters), GIFT layers within 1e-3 relative L2; error
//             bound against the FP32 average; gaps untouched.
//   fp32/bf16 device vs host: bitwise for W <= 2 (a sum of two is
//             order-free), else within rounding of the summation order.
//   fp4       3 steps on nvfp4 / mxfp4 layers with the default Euclidean
//             error feedback and an nvfp4 GIFT layer, a NaN in step 1:
//             Euclidean layers bit for bit against the host, the GIFT layer
//             within 2e-2 relative L2 (a 4-bit rounding may flip).
//   nccl-fp8  sm_90: error bound of the global-scale FP8 sum (bitwise
//             against the host model for W = 1) and the NaN flag; below
//             sm_90: FAILED_PRECONDITION naming sm_90.
// Reports "hash=..." of every device result for the cross-rank comparison.
// Exit 0 when every check passes, 1 on a failed check, 2 on setup errors,
// 3 when NCCL refuses several ranks on one GPU (the report says so).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/allreduce_engine.h"
#include "client/store.h"
#include "client/synthetic_testutil.h"
#include "client/transport_factory.h"
#include "common/testing.h"
#include "kernels/fp8.h"
#include "tests/multiprocess/allreduce_check.h"
#include "tests/multiprocess/harness.h"
#include "tests/multiprocess/rank_checker.h"

namespace gift::multiprocess {
namespace {

using client::AllReduceEngine;
using client::AllReduceEngineOptions;
using client::AllReduceMode;
using client::BucketLayer;
using client::EpochPlan;
using client::LayerPath;
using client::StepTelemetry;
using client::Transport;
using client::VersionedFactors;

constexpr int kExitSetup = 2;
constexpr int kExitDuplicateGpu = 3;

using Checker = gift::testing::RankChecker;

EpochPlan MixedPlan() {
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
       .block_size = 1000},
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

// A device copy of a host bucket.
class DeviceBucket {
 public:
  explicit DeviceBucket(size_t n) : n_(n) {
    ok_ = cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(float)) ==
          cudaSuccess;
  }
  ~DeviceBucket() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  bool ok() const { return ok_; }
  float* get() { return static_cast<float*>(ptr_); }
  // Synchronous with every stream: the allreduce runs on a non-blocking
  // stream of its own, which the legacy-stream copies do not order with.
  absl::Status Upload(const std::vector<float>& h) {
    cudaError_t e =
        cudaMemcpy(ptr_, h.data(), n_ * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("upload: ", cudaGetErrorString(e)));
  }
  absl::Status Download(std::vector<float>* h) {
    h->resize(n_);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) {
      e = cudaMemcpy(h->data(), ptr_, n_ * sizeof(float),
                     cudaMemcpyDeviceToHost);
    }
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("download: ", cudaGetErrorString(e)));
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
  bool ok_ = false;
};

// NaN equals NaN whatever its payload (the GPU's NaN is canonical).
int64_t BitDiffs(const float* a, const float* b, int64_t n, int64_t* first) {
  int64_t bad = 0;
  *first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      if (bad++ == 0) *first = i;
    }
  }
  return bad;
}

// Device result `dev` of one layer against the host result `host`.
void CompareLayer(Checker& check, const std::string& what, const BucketLayer& l,
                  const std::vector<float>& dev, const std::vector<float>& host,
                  bool bitwise, double tol) {
  const float* d = dev.data() + l.offset;
  const float* h = host.data() + l.offset;
  if (bitwise) {
    int64_t first = 0;
    const int64_t bad = BitDiffs(d, h, l.size(), &first);
    check.Expect(
        bad == 0,
        absl::StrCat(what, " layer ", l.name, ": ", bad, " of ", l.size(),
                     " elements differ from the host bits",
                     bad ? absl::StrCat("; first at ", first, ": device ",
                                        d[first], " host ", h[first])
                         : ""));
    return;
  }
  const double rel = gift::testing::RelL2(d, h, l.size());
  check.Expect(rel <= tol,
               absl::StrCat(what, " layer ", l.name,
                            ": device vs host relative L2 ", rel, " > ", tol));
}

struct Pair {
  std::unique_ptr<AllReduceEngine> host, dev;
};

absl::StatusOr<Pair> MakePair(Transport& gloo, Transport& nccl,
                              const EpochPlan& plan,
                              const AllReduceEngineOptions& o) {
  Pair p;
  auto h = AllReduceEngine::Create(&gloo, plan, o);
  if (!h.ok()) return h.status();
  auto d = AllReduceEngine::Create(&nccl, plan, o);
  if (!d.ok()) return d.status();
  p.host = std::move(*h);
  p.dev = std::move(*d);
  return p;
}

// The fp8 steps through both paths.
void RunFp8(Checker& check, Transport& gloo, Transport& nccl,
            std::string* hashes) {
  const int w = nccl.world_size(), me = nccl.rank();
  const EpochPlan plan = MixedPlan();
  AllReduceEngineOptions o;
  o.piece_bytes = 256 << 10;
  o.probe_interval = 2;
  auto pair = MakePair(gloo, nccl, plan, o);
  if (!check.ExpectOk(pair.status(), "fp8: create")) return;
  VersionedFactors f;
  const client::LayerFactor low1 = client::SyntheticLowRank(1, 128, 16, 11);
  const client::LayerFactor full1 = client::SyntheticFull(1, 96, 12);
  check.ExpectOk(f.Put("g_low", low1), "put");
  check.ExpectOk(f.Put("g_full", full1), "put");
  DeviceBucket d(plan.bucket_elements());
  if (!check.Expect(d.ok(), "cudaMalloc of the bucket")) return;
  std::vector<float> host(plan.bucket_elements()), dev;
  for (int step = 0; step < 4; ++step) {
    const std::string what = absl::StrCat("fp8 step ", step);
    FillBucket(plan, me, step, host.data());
    if (step == 1 && me == w - 1) host[plan.layers()[6].offset + 777] = NAN;
    if (step == 1 && me == 0) host[plan.layers()[2].offset] = INFINITY;
    if (step == 2) {  // both GIFT layers switch to version 2
      check.ExpectOk(f.Put("g_low", client::SyntheticLowRank(2, 128, 16, 21)),
                     "put");
      check.ExpectOk(f.Put("g_full", client::SyntheticFull(2, 96, 22)), "put");
    }
    if (!check.ExpectOk(d.Upload(host), what)) return;
    StepTelemetry th, td;
    if (!check.ExpectOk(pair->dev->Run(d.get(), f, &td), what + " device") ||
        !check.ExpectOk(pair->host->Run(host.data(), f, &th), what + " host") ||
        !check.ExpectOk(d.Download(&dev), what)) {
      return;
    }
    absl::StrAppend(hashes, HashHex(dev.data(), dev.size()), ",");
    // Gaps and Euclidean layers: bit for bit; GIFT layers: GEMM rounding.
    for (const BucketLayer& l : plan.layers()) {
      CompareLayer(check, what, l, dev, host, l.path == LayerPath::kEuclid,
                   1e-3);
    }
    int64_t first = 0;
    int64_t end = 0, gap_diffs = 0;
    for (const BucketLayer& l : plan.layers()) {
      gap_diffs +=
          BitDiffs(dev.data() + end, host.data() + end, l.offset - end, &first);
      end = l.offset + l.size();
    }
    gap_diffs += BitDiffs(dev.data() + end, host.data() + end,
                          plan.bucket_elements() - end, &first);
    check.Expect(gap_diffs == 0,
                 absl::StrCat(what, ": ", gap_diffs, " gap elements differ"));
    check.Expect(
        td.nonfinite_layers == th.nonfinite_layers &&
            td.nonfinite_layers == (step == 1 ? 2 : 0),
        absl::StrCat(what, ": non-finite layers device ", td.nonfinite_layers,
                     " host ", th.nonfinite_layers));
    check.Expect(td.probe_step == th.probe_step, what + ": probe step differs");
    for (size_t i = 0; i < plan.layers().size(); ++i) {
      const auto &a = td.layers[i].local, &b = th.layers[i].local;
      check.Expect(
          td.layers[i].path == th.layers[i].path &&
              td.layers[i].factor_version == th.layers[i].factor_version,
          absl::StrCat(what, " layer ", i, ": path/version differ"));
      if (plan.layers()[i].path == LayerPath::kEuclid) {
        check.Expect(
            a.n == b.n && a.upper == b.upper && a.lower == b.lower &&
                a.nonfinite == b.nonfinite,
            absl::StrCat(what, " layer ", i, ": counters device n=", a.n,
                         " upper=", a.upper, " lower=", a.lower, " host n=",
                         b.n, " upper=", b.upper, " lower=", b.lower));
      }
      if (th.layers[i].probed) {
        check.Expect(td.layers[i].probed &&
                         std::abs(td.layers[i].probe_gift_rel_l2 -
                                  th.layers[i].probe_gift_rel_l2) <=
                             1e-3 * th.layers[i].probe_gift_rel_l2 + 1e-6 &&
                         std::abs(td.layers[i].probe_euclid_rel_l2 -
                                  th.layers[i].probe_euclid_rel_l2) <=
                             1e-6 * th.layers[i].probe_euclid_rel_l2 + 1e-9,
                     absl::StrCat(what, " layer ", i, ": probe device ",
                                  td.layers[i].probe_euclid_rel_l2, "/",
                                  td.layers[i].probe_gift_rel_l2, " host ",
                                  th.layers[i].probe_euclid_rel_l2, "/",
                                  th.layers[i].probe_gift_rel_l2));
      }
    }
    if (step == 1) continue;
    int64_t nonzero = 0;
    for (int l : {0, 2, 4, 6}) {
      check.ExpectEmpty(
          CheckEuclidLayer(plan, l, w, step, dev.data(), &nonzero));
    }
    check.Expect(nonzero > 0, what + ": no quantization error: not quantized?");
    if (step == 0) {
      check.ExpectEmpty(CheckGiftLayer(plan, 3, low1, w, 0, dev.data()));
      check.ExpectEmpty(CheckGiftLayer(plan, 5, full1, w, 0, dev.data()));
    }
    if (w > 1) {
      const double ring =
          2.0 * (w - 1) / w * 4.0 * double(plan.communicated_elements());
      const double payload = td.bytes_euclid + td.bytes_gift;
      check.Expect(payload <= 0.255 * ring && payload >= 0.24 * ring,
                   absl::StrCat(what, ": device payload ", payload,
                                " bytes vs FP32 ring ", ring));
    }
  }
}

// 4-bit layers with error feedback through both paths.
void RunFp4(Checker& check, Transport& gloo, Transport& nccl,
            std::string* hashes) {
  const int w = nccl.world_size(), me = nccl.rank();
  const auto nv = kernels::Fp4Format::kNvfp4;
  const EpochPlan plan = *EpochPlan::Create(
      1, 180000,
      {{.name = "nv", .shape = {301, 317}, .offset = 0, .format = nv},
       {.name = "mx",
        .shape = {50003},
        .offset = 95420,
        .format = kernels::Fp4Format::kMxfp4},
       {.name = "g4",
        .shape = {192, 128},
        .offset = 145430,
        .path = LayerPath::kGift,
        .format = nv}});
  AllReduceEngineOptions o;
  o.piece_bytes = 256 << 10;
  auto pair = MakePair(gloo, nccl, plan, o);
  if (!check.ExpectOk(pair.status(), "fp4: create")) return;
  VersionedFactors f;
  check.ExpectOk(f.Put("g4", client::SyntheticLowRank(1, 128, 16, 11)), "put");
  DeviceBucket d(plan.bucket_elements());
  if (!check.Expect(d.ok(), "cudaMalloc of the bucket")) return;
  std::vector<float> host(plan.bucket_elements()), dev;
  for (int step = 0; step < 3; ++step) {
    const std::string what = absl::StrCat("fp4 step ", step);
    FillBucket(plan, me, step, host.data());
    if (step == 1 && me == w - 1) host[plan.layers()[1].offset + 99] = NAN;
    if (!check.ExpectOk(d.Upload(host), what)) return;
    StepTelemetry th, td;
    if (!check.ExpectOk(pair->dev->Run(d.get(), f, &td), what + " device") ||
        !check.ExpectOk(pair->host->Run(host.data(), f, &th), what + " host") ||
        !check.ExpectOk(d.Download(&dev), what)) {
      return;
    }
    absl::StrAppend(hashes, HashHex(dev.data(), dev.size()), ",");
    for (const BucketLayer& l : plan.layers()) {
      CompareLayer(check, what, l, dev, host, l.path == LayerPath::kEuclid,
                   2e-2);
    }
    check.Expect(
        td.nonfinite_layers == th.nonfinite_layers &&
            td.nonfinite_layers == (step == 1 ? 1 : 0),
        absl::StrCat(what, ": non-finite layers device ", td.nonfinite_layers,
                     " host ", th.nonfinite_layers));
  }
}

// fp32 and bf16 through both paths.
void RunPlain(Checker& check, Transport& gloo, Transport& nccl,
              std::string* hashes) {
  const int w = nccl.world_size(), me = nccl.rank();
  const EpochPlan plan = MixedPlan();
  DeviceBucket d(plan.bucket_elements());
  if (!check.Expect(d.ok(), "cudaMalloc of the bucket")) return;
  for (AllReduceMode mode : {AllReduceMode::kFp32, AllReduceMode::kBf16}) {
    const std::string what(client::AllReduceModeName(mode));
    AllReduceEngineOptions o;
    o.mode = mode;
    auto pair = MakePair(gloo, nccl, plan, o);
    if (!check.ExpectOk(pair.status(), what + ": create")) return;
    std::vector<float> host(plan.bucket_elements()), dev;
    FillBucket(plan, me, 5, host.data());
    if (!check.ExpectOk(d.Upload(host), what)) return;
    StepTelemetry th, td;
    VersionedFactors none;
    if (!check.ExpectOk(pair->dev->Run(d.get(), none, &td), what) ||
        !check.ExpectOk(pair->host->Run(host.data(), none, &th), what) ||
        !check.ExpectOk(d.Download(&dev), what)) {
      return;
    }
    absl::StrAppend(hashes, HashHex(dev.data(), dev.size()), ",");
    const double tol = mode == AllReduceMode::kFp32 ? 1e-6 : 2e-2;
    for (const BucketLayer& l : plan.layers()) {
      CompareLayer(check, what, l, dev, host, w <= 2, tol);
    }
  }
}

// nccl-fp8 on the device path only.
void RunNcclFp8(Checker& check, Transport& nccl, std::string* hashes) {
  const int w = nccl.world_size(), me = nccl.rank();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  std::vector<BucketLayer> l = {
      {.name = "a", .shape = {1000, 257}, .offset = 0},
      {.name = "zero", .shape = {33}, .offset = 257000},
      {.name = "e5",
       .shape = {5001},
       .offset = 257040,
       .format = kernels::Fp8Format::kE5M2},
      {.name = "nan", .shape = {999}, .offset = 262041}};
  const EpochPlan plan = *EpochPlan::Create(1, 263040, std::move(l));
  AllReduceEngineOptions o;
  o.mode = AllReduceMode::kNcclFp8;
  auto ar = AllReduceEngine::Create(&nccl, plan, o);
  if (major < 9) {
    check.Expect(
        !ar.ok() &&
            ar.status().code() == absl::StatusCode::kFailedPrecondition &&
            absl::StrContains(ar.status().message(), "sm_90"),
        absl::StrCat("nccl-fp8 below sm_90: ", ar.status().ToString()));
    return;
  }
  if (!check.ExpectOk(ar.status(), "nccl-fp8: create")) return;
  std::vector<std::vector<float>> inputs(w);
  for (int p = 0; p < w; ++p) {
    inputs[p].resize(plan.bucket_elements());
    FillBucket(plan, p, 7, inputs[p].data());
    for (int64_t i = 0; i < 33; ++i) inputs[p][257000 + i] = 0.0f;
  }
  inputs[w - 1][262041 + 500] = NAN;
  DeviceBucket d(plan.bucket_elements());
  std::vector<float> dev;
  StepTelemetry t;
  if (!check.Expect(d.ok(), "cudaMalloc") ||
      !check.ExpectOk(d.Upload(inputs[me]), "upload") ||
      !check.ExpectOk((*ar)->Run(d.get(), {}, &t), "nccl-fp8 Run") ||
      !check.ExpectOk(d.Download(&dev), "download")) {
    return;
  }
  absl::StrAppend(hashes, HashHex(dev.data(), dev.size()), ",");
  check.Expect(
      t.nonfinite_layers == 1 && t.layers[3].nonfinite_result,
      absl::StrCat("nccl-fp8: non-finite layers ", t.nonfinite_layers));
  for (int64_t i = 262041; i < 263040; ++i) {
    if (!check.Expect(std::isnan(dev[i]), "nccl-fp8: NaN layer not all NaN"))
      break;
  }
  if (w > 1) {
    const double bytes = 2.0 * (w - 1) / w * plan.communicated_elements();
    check.Expect(
        t.bytes_euclid >= bytes && t.bytes_euclid <= bytes + 1024,
        absl::StrCat("nccl-fp8 bytes ", t.bytes_euclid, " vs ", bytes));
  }
  // Finite layers: the global-scale model, exact for W = 1, else bounded.
  for (int li = 0; li < 3; ++li) {
    const BucketLayer& s = plan.layers()[li];
    const kernels::Fp8Format fmt = s.format.fp8();
    const float fmax = kernels::Fp8Max(fmt);
    const double rel = fmt == kernels::Fp8Format::kE4M3 ? 1.0 / 16 : 0.125;
    const double sub = fmt == kernels::Fp8Format::kE4M3 ? std::ldexp(1, -10)
                                                        : std::ldexp(1, -17);
    float amax = 0;
    for (int p = 0; p < w; ++p) {
      for (int64_t i = 0; i < s.size(); ++i) {
        amax = std::max(amax, std::abs(inputs[p][s.offset + i]));
      }
    }
    const float scale = amax == 0 ? 1.0f : (float(w) * amax) / fmax;
    int64_t bad = 0, first = -1, inexact = 0;
    for (int64_t i = 0; i < s.size(); ++i) {
      const int64_t k = s.offset + i;
      double mean = 0, abs_sum = 0;
      for (int p = 0; p < w; ++p) {
        mean += inputs[p][k];
        abs_sum += std::abs(inputs[p][k]);
      }
      mean /= w;
      bool ok;
      if (w == 1) {
        const float want =
            (kernels::DecodeFp8(kernels::EncodeFp8(inputs[0][k] / scale, fmt),
                                fmt) *
             scale) /
            1.0f;
        ok = std::memcmp(&want, &dev[k], 4) == 0;
      } else {
        const double q = rel * abs_sum + w * sub * scale;  // Σ_p rounding
        const double sum =
            (w - 1) *
            (rel * (abs_sum * (1 + rel) + w * sub * scale) + sub * scale);
        ok = std::abs(dev[k] - mean) <= (q + sum) / w + 1e-6 * abs_sum;
      }
      if (!ok && bad++ == 0) first = k;
      inexact += dev[k] != static_cast<float>(mean);
    }
    check.Expect(s.name == "zero" || inexact > 0,
                 absl::StrCat("nccl-fp8 layer ", s.name,
                              ": exact mean everywhere: not quantized?"));
    check.Expect(bad == 0,
                 absl::StrCat("nccl-fp8 layer ", s.name, ": ", bad,
                              " elements off; first ", first,
                              bad ? absl::StrCat(" = ", dev[first]) : ""));
  }
}

bool DuplicateGpu(const absl::Status& s) {
  return absl::StrContains(s.message(), "invalid usage") ||
         absl::StrContains(s.message(), "Duplicate GPU");
}

int Main() {
  absl::StatusOr<RankEnv> env = RankEnvFromEnvironment();
  if (!env.ok()) return kExitSetup;
  auto store = client::FileStore::Create(env->store_dir);
  if (!store.ok()) return kExitSetup;
  client::PrefixStore gloo_store("gloo/", store->get());
  client::PrefixStore nccl_store("nccl/", store->get());
  client::TransportOptions options;
  options.rank = env->rank;
  options.world_size = env->world_size;
  options.timeout = absl::Seconds(60);
  options.store = &gloo_store;
  auto gloo = client::CreateTransport(options);
  options.backend = "nccl";
  options.store = &nccl_store;
  options.device = 0;
  auto nccl = client::CreateTransport(options);
  if (!gloo.ok() || !nccl.ok()) {
    const absl::Status s = gloo.ok() ? nccl.status() : gloo.status();
    std::cerr << "rank " << env->rank << ": " << s << std::endl;
    if (!nccl.ok() && DuplicateGpu(nccl.status())) {
      (void)WriteRankReport(*env, absl::StrCat("duplicate_gpu=", s.message()));
      return kExitDuplicateGpu;
    }
    return kExitSetup;
  }
  Checker check(env->rank);
  std::string hashes;
  RunFp8(check, **gloo, **nccl, &hashes);
  RunFp4(check, **gloo, **nccl, &hashes);
  RunPlain(check, **gloo, **nccl, &hashes);
  RunNcclFp8(check, **nccl, &hashes);
  if (!WriteRankReport(*env, absl::StrCat("hash=", hashes)).ok()) {
    return kExitSetup;
  }
  return check.exit_code();
}

}  // namespace
}  // namespace gift::multiprocess

int main() { return gift::multiprocess::Main(); }
