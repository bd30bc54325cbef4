// The device path of AllReduceEngine (fp8_backend.h, nccl_fp8_allreduce.h)
// on one GPU:
//  * the device backend's primitives against the host backend's on seeded
//    random data with NaN/Inf/subnormals (bitwise where the contract says
//    so, every output element written), in process with a one-rank NCCL
//    communicator;
//  * device_allreduce_worker as 1, 2 and 4 rank processes on device 0: each
//    rank checks its device results against the host (Gloo) path and the
//    FP32 bounds itself; here the exit codes and the cross-rank bitwise
//    identity of the device results (hashes) are checked. NCCL refuses two
//    ranks of one communicator on one GPU ("Duplicate GPU detected", NCCL
//    2.5+): the multi-rank cases then skip and say so, the one-rank case
//    always runs.
// Every test skips without a CUDA device. Registered from
// client/CMakeLists.txt (label gpu).
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/fp8_backend.h"
#include "client/host_fp8_backend.h"
#include "client/synthetic_testutil.h"
#include "client/transport_factory.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "kernels/gpu.h"
#include "tests/multiprocess/harness.h"

namespace gift::client {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Seeded values over many binades, with specials sprinkled in; never zeros.
std::vector<float> RandomData(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 30);
  std::vector<float> x(n);
  for (float& v : x) v = std::ldexp(g(rng), ex(rng));
  if (specials && n > 8) {
    x[1] = kNaN;
    x[3] = kInf;
    x[5] = -kInf;
    x[7] = 1e-40f;  // subnormal
  }
  return x;
}

// The copies below are synchronous with every stream (the backend queues on
// a non-blocking stream of its own).
template <typename T>
std::vector<T> Download(Fp8Buffer& b, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(h.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost),
      cudaSuccess);
  return h;
}

template <typename T>
void Upload(Fp8Buffer& b, const std::vector<T>& h) {
  ASSERT_OK(b.Resize(h.size() * sizeof(T)));
  ASSERT_EQ(cudaMemcpy(b.data(), h.data(), h.size() * sizeof(T),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Elements whose bits differ. NaN equals NaN whatever its payload: the GPU
// produces the canonical NaN where the CPU propagates an operand's (the
// kernels' contract, as in quantize_gpu_test).
template <typename T>
int64_t BitDiffs(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    }
    bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  }
  return bad;
}

class DeviceBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::Available()) GTEST_SKIP() << "no GPU";
    ASSERT_TRUE(tmp_.ok());
    dir_ = tmp_.path();
    auto store = FileStore::Create(dir_);
    ASSERT_OK(store);
    store_ = std::move(*store);
    TransportOptions o;
    o.backend = "nccl";
    o.rank = 0;
    o.world_size = 1;
    o.store = store_.get();
    o.timeout = absl::Seconds(30);
    auto comm = CreateTransport(o);
    ASSERT_OK(comm);
    comm_ = std::move(*comm);
    auto b = CreateFp8Backend(comm_.get());
    ASSERT_OK(b);
    dev_ = std::move(*b);
    ASSERT_EQ(dev_->memory().memory_kind(), MemoryKind::kDevice);
  }
  void TearDown() override {
    dev_.reset();
    comm_.reset();
  }

  // A device buffer holding `fill` bytes everywhere (to see unwritten
  // outputs).
  std::unique_ptr<Fp8Buffer> Sentinel(size_t bytes, int fill) {
    std::unique_ptr<Fp8Buffer> b = dev_->memory().NewBuffer();
    EXPECT_OK(b->Resize(bytes));
    EXPECT_EQ(cudaMemset(b->data(), fill, bytes), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return b;
  }

  gift::testing::TempDir tmp_{"gift_dev_backend"};
  std::string dir_;
  std::unique_ptr<FileStore> store_;
  std::unique_ptr<Transport> comm_;
  std::unique_ptr<Fp8Backend> dev_;
  HostFp8Backend host_{nullptr};  // its control() is not used here
};

TEST_F(DeviceBackendTest, ElementwiseOpsMatchHostBitwise) {
  constexpr int64_t kN = 300007;
  const std::vector<float> x = RandomData(kN, 1, true);
  const std::vector<float> y = RandomData(kN, 2, true);
  auto dx = dev_->memory().NewBuffer(), dy = dev_->memory().NewBuffer();
  Upload(*dx, x);
  Upload(*dy, y);

  std::vector<float> h = x;  // acc + y, then / 3
  ASSERT_OK(host_.math().AddInPlace(h.data(), y.data(), kN));
  ASSERT_OK(host_.math().Divide(h.data(), kN, 3.0f));
  ASSERT_OK(dev_->math().AddInPlace(dx->floats(), dy->floats(), kN));
  ASSERT_OK(dev_->math().Divide(dx->floats(), kN, 3.0f));
  EXPECT_EQ(BitDiffs(Download<float>(*dx, kN), h), 0) << "add + divide";

  std::vector<uint16_t> hb(kN);
  std::vector<float> hf(kN);
  ASSERT_OK(host_.math().ToBf16(y.data(), kN, hb.data()));
  ASSERT_OK(host_.math().FromBf16(hb.data(), kN, hf.data()));
  auto db = Sentinel(kN * 2, 0xA5), df = Sentinel(kN * 4, 0xA5);
  ASSERT_OK(dev_->math().ToBf16(dy->floats(), kN,
                                static_cast<uint16_t*>(db->data())));
  ASSERT_OK(dev_->math().FromBf16(static_cast<uint16_t*>(db->data()), kN,
                                  df->floats()));
  EXPECT_EQ(BitDiffs(Download<uint16_t>(*db, kN), hb), 0) << "to bf16";
  EXPECT_EQ(BitDiffs(Download<float>(*df, kN), hf), 0) << "from bf16";

  auto dn = Sentinel(kN * 4, 0);
  ASSERT_OK(dev_->math().FillNaN(dn->floats(), kN));
  std::vector<float> hn(kN);
  ASSERT_OK(host_.math().FillNaN(hn.data(), kN));
  EXPECT_EQ(BitDiffs(Download<float>(*dn, kN), hn), 0) << "fill NaN";
}

// The capped owner release: integer-valued data keep both sums exact in
// double whatever their order, so f and every result bit agree; one case
// binds the cap (f < 1), one does not (AddInPlace's bits, keep = 0).
TEST_F(DeviceBackendTest, AddCappedMatchesHostBitwise) {
  constexpr int64_t kN = 100003;
  for (float scale : {8.0f, 0.01f}) {
    std::vector<float> acc(kN), res(kN);
    for (int64_t i = 0; i < kN; ++i) {
      acc[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
      res[i] = scale * static_cast<float>(static_cast<int>(i % 13) - 6);
    }
    auto da = dev_->memory().NewBuffer(), dr = dev_->memory().NewBuffer();
    Upload(*da, acc);
    Upload(*dr, res);
    auto dk = Sentinel(kN * 4, 0xA5);
    std::vector<float> hk(kN);
    ASSERT_OK(
        host_.math().AddCapped(acc.data(), res.data(), kN, 0.25f, hk.data()));
    ASSERT_OK(dev_->math().AddCapped(da->floats(), dr->floats(), kN, 0.25f,
                                     dk->floats()));
    EXPECT_EQ(BitDiffs(Download<float>(*da, kN), acc), 0) << scale;
    EXPECT_EQ(BitDiffs(Download<float>(*dk, kN), hk), 0) << scale;
  }
}

// Audit steps: the comparison slots of the device agree with the host's
// (the sums in double; only their order differs), and slots are separate.
TEST_F(DeviceBackendTest, CompareSlotsMatchHost) {
  constexpr int64_t kN = 200003;
  const std::vector<float> ref = RandomData(kN, 3, true);
  const std::vector<float> x = RandomData(kN, 4, true);
  auto dref = dev_->memory().NewBuffer(), dx = dev_->memory().NewBuffer();
  Upload(*dref, ref);
  Upload(*dx, x);
  ASSERT_OK(host_.compare().BeginCompare(3));
  ASSERT_OK(host_.compare().Compare(ref.data(), x.data(), kN, 0));
  ASSERT_OK(host_.compare().Compare(x.data(), x.data(), kN, 2));
  ASSERT_OK(dev_->compare().BeginCompare(3));
  ASSERT_OK(dev_->compare().Compare(dref->floats(), dx->floats(), kN, 0));
  ASSERT_OK(dev_->compare().Compare(dx->floats(), dx->floats(), kN, 2));
  EXPECT_FALSE(
      dev_->compare().Compare(dref->floats(), dx->floats(), kN, 3).ok());
  std::vector<kernels::QuantizeStats> h, d;
  ASSERT_OK(host_.compare().EndCompare(&h));
  ASSERT_OK(dev_->compare().EndCompare(&d));
  ASSERT_EQ(d.size(), 3u);
  for (int i : {0, 2}) {
    EXPECT_NEAR(d[i].err_sq, h[i].err_sq, 1e-9 * (1 + h[i].err_sq)) << i;
    EXPECT_NEAR(d[i].x_sq, h[i].x_sq, 1e-9 * h[i].x_sq) << i;
    EXPECT_NEAR(d[i].xhat_x, h[i].xhat_x, 1e-9 * std::abs(h[i].x_sq)) << i;
  }
  EXPECT_EQ(d[1].x_sq, 0.0);    // an unused slot stays zero
  EXPECT_EQ(d[2].err_sq, 0.0);  // x against itself
  EXPECT_NEAR(d[0].RelL2(), h[0].RelL2(), 1e-9);
  EXPECT_NEAR(d[0].Cosine(), h[0].Cosine(), 1e-9);
}

TEST_F(DeviceBackendTest, RoundPrimitivesMatchHost) {
  constexpr int64_t kN = 65537;
  const kernels::QuantizeSpec spec{kernels::Fp8Format::kE4M3, 1000};
  const int64_t ns = kernels::NumScales(kN, spec.block_size);
  std::vector<float> x = RandomData(kN, 3, false);
  x[12345] = kNaN;  // a flagged block
  std::vector<uint8_t> hq(kN);
  std::vector<float> hs(ns), hr(kN), hacc(kN);
  ASSERT_OK(host_.codec().BeginRound(2, 3));
  ASSERT_OK(host_.codec().Quantize(x.data(), kN, spec, hq.data(), hs.data(),
                                   hr.data(), 1));
  const kernels::Fp8Source hsrc[2] = {{hq.data(), hs.data()},
                                      {hq.data(), hs.data()}};
  ASSERT_OK(host_.codec().Accumulate(hsrc, 2, kN, spec, hacc.data()));
  ASSERT_OK(host_.codec().FlagNonFinite(hs.data(), ns, 2));
  ASSERT_OK(host_.codec().FlagNonFinite(hr.data(), kN, 0));
  std::vector<kernels::QuantizeStats> hst, dst;
  std::vector<uint8_t> hfl, dfl;
  ASSERT_OK(host_.codec().EndRound(&hst, &hfl));

  auto dx = dev_->memory().NewBuffer();
  Upload(*dx, x);
  auto dq = Sentinel(kN, 0x55), ds = Sentinel(ns * 4, 0x55),
       dr = Sentinel(kN * 4, 0x55), dacc = Sentinel(kN * 4, 0x55);
  ASSERT_OK(dev_->codec().BeginRound(2, 3));
  ASSERT_OK(dev_->codec().Quantize(dx->floats(), kN, spec, dq->u8(),
                                   ds->floats(), dr->floats(), 1));
  const kernels::Fp8Source dsrc[2] = {{dq->u8(), ds->floats()},
                                      {dq->u8(), ds->floats()}};
  ASSERT_OK(dev_->codec().Accumulate(dsrc, 2, kN, spec, dacc->floats()));
  ASSERT_OK(dev_->codec().FlagNonFinite(ds->floats(), ns, 2));
  ASSERT_OK(dev_->codec().FlagNonFinite(dr->floats(), kN, 0));
  ASSERT_OK(dev_->codec().EndRound(&dst, &dfl));

  EXPECT_EQ(BitDiffs(Download<uint8_t>(*dq, kN), hq), 0) << "codes";
  EXPECT_EQ(BitDiffs(Download<float>(*ds, ns), hs), 0) << "scales";
  EXPECT_EQ(BitDiffs(Download<float>(*dr, kN), hr), 0) << "residuals";
  EXPECT_EQ(BitDiffs(Download<float>(*dacc, kN), hacc), 0) << "sums";
  EXPECT_EQ(dfl, hfl) << "flags";
  EXPECT_EQ(dfl, (std::vector<uint8_t>{0, 0, 1}));
  ASSERT_EQ(dst.size(), 2u);
  EXPECT_EQ(dst[0].n, 0) << "slot 0 was never written: must stay clear";
  EXPECT_EQ(dst[1].n, hst[1].n);
  EXPECT_EQ(dst[1].upper, hst[1].upper);
  EXPECT_EQ(dst[1].lower, hst[1].lower);
  EXPECT_EQ(dst[1].nonfinite, 1);
  EXPECT_NEAR(dst[1].err_sq, hst[1].err_sq, 1e-9 * hst[1].err_sq);
}

TEST_F(DeviceBackendTest, FourBitRoundPrimitivesMatchHost) {
  constexpr int64_t kN = 65537;  // odd: a half byte and a ragged block
  for (kernels::Fp4Format f :
       {kernels::Fp4Format::kNvfp4, kernels::Fp4Format::kMxfp4}) {
    const int64_t nb = kernels::Fp4NumBlocks(kN, f),
                  nq = kernels::Fp4PackedBytes(kN);
    std::vector<float> x = RandomData(kN, 5, false);
    x[4321] = kNaN;  // a flagged block
    std::vector<uint8_t> hq(nq), hb(nb);
    std::vector<float> ht(1), hr(kN), hacc(kN), hout(kN);
    ASSERT_OK(host_.codec().BeginRound(1, 2));
    ASSERT_OK(host_.codec().QuantizeFp4(x.data(), kN, f, hq.data(), hb.data(),
                                        ht.data(), hr.data(), 0));
    const kernels::Fp4Source hsrc[2] = {{hq.data(), hb.data(), ht.data()},
                                        {hq.data(), hb.data(), ht.data()}};
    ASSERT_OK(host_.codec().AccumulateFp4(hsrc, 2, kN, f, hacc.data()));
    ASSERT_OK(host_.codec().DequantizeFp4(hq.data(), hb.data(), ht.data(), kN,
                                          f, hout.data()));
    ASSERT_OK(host_.codec().FlagNonFiniteFp4(hb.data(), nb, ht.data(), f, 1));
    std::vector<kernels::QuantizeStats> hst, dst;
    std::vector<uint8_t> hfl, dfl;
    ASSERT_OK(host_.codec().EndRound(&hst, &hfl));

    auto dx = dev_->memory().NewBuffer();
    Upload(*dx, x);
    auto dq = Sentinel(nq, 0x55), db = Sentinel(nb, 0x55),
         dt = Sentinel(4, 0x55), dr = Sentinel(kN * 4, 0x55),
         dacc = Sentinel(kN * 4, 0x55), dout = Sentinel(kN * 4, 0x55);
    ASSERT_OK(dev_->codec().BeginRound(1, 2));
    ASSERT_OK(dev_->codec().QuantizeFp4(dx->floats(), kN, f, dq->u8(), db->u8(),
                                        dt->floats(), dr->floats(), 0));
    const kernels::Fp4Source dsrc[2] = {{dq->u8(), db->u8(), dt->floats()},
                                        {dq->u8(), db->u8(), dt->floats()}};
    ASSERT_OK(dev_->codec().AccumulateFp4(dsrc, 2, kN, f, dacc->floats()));
    ASSERT_OK(dev_->codec().DequantizeFp4(dq->u8(), db->u8(), dt->floats(), kN,
                                          f, dout->floats()));
    ASSERT_OK(dev_->codec().FlagNonFiniteFp4(db->u8(), nb, dt->floats(), f, 1));
    ASSERT_OK(dev_->codec().EndRound(&dst, &dfl));

    EXPECT_EQ(BitDiffs(Download<uint8_t>(*dq, nq), hq), 0) << "codes";
    EXPECT_EQ(BitDiffs(Download<uint8_t>(*db, nb), hb), 0) << "block scales";
    EXPECT_EQ(BitDiffs(Download<float>(*dt, 1), ht), 0) << "tensor scale";
    EXPECT_EQ(BitDiffs(Download<float>(*dr, kN), hr), 0) << "residuals";
    EXPECT_EQ(BitDiffs(Download<float>(*dacc, kN), hacc), 0) << "sums";
    EXPECT_EQ(BitDiffs(Download<float>(*dout, kN), hout), 0) << "values";
    EXPECT_EQ(dfl, hfl) << "flags";
    EXPECT_EQ(dfl, (std::vector<uint8_t>{0, 1}));
    ASSERT_EQ(dst.size(), 1u);
    EXPECT_EQ(dst[0].n, hst[0].n);
    EXPECT_EQ(dst[0].upper, hst[0].upper);
    EXPECT_EQ(dst[0].nonfinite, 1);
  }
}

TEST_F(DeviceBackendTest, GiftTransformsAndProbeMatchHost) {
  constexpr int64_t kRows = 96, kD = 128;
  const LayerFactor low1 = SyntheticLowRank(1, kD, 16, 5);
  const LayerFactor low2 = SyntheticLowRank(2, kD, 16, 6);
  const LayerFactor full = SyntheticFull(3, kD, 7);
  const std::vector<float> x = RandomData(kRows * kD, 8, false);
  const std::vector<float> add = RandomData(kRows * kD, 9, false);
  auto dx = dev_->memory().NewBuffer(), dadd = dev_->memory().NewBuffer();
  Upload(*dx, x);
  Upload(*dadd, add);
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      r += double(b[i]) * b[i];
    }
    return std::sqrt(e / r);
  };
  for (const LayerFactor* f : {&low1, &full}) {
    SCOPED_TRACE(f->kind == GiftTransform::kFull ? "full" : "low-rank");
    std::vector<float> h(x.size()), hi(x.size());
    ASSERT_OK(
        host_.transforms().Forward(*f, x.data(), kRows, add.data(), h.data()));
    ASSERT_OK(host_.transforms().Inverse(*f, h.data(), kRows, hi.data()));
    auto d = Sentinel(x.size() * 4, 0x7F), di = Sentinel(x.size() * 4, 0x7F);
    ASSERT_OK(dev_->transforms().Forward(*f, dx->floats(), kRows,
                                         dadd->floats(), d->floats()));
    ASSERT_OK(dev_->transforms().Inverse(*f, d->floats(), kRows, di->floats()));
    EXPECT_LT(rel(Download<float>(*d, x.size()), h), 1e-5);
    EXPECT_LT(rel(Download<float>(*di, x.size()), hi), 1e-5);
  }
  // Re-projection low → low (fused kernel) and low → full (two products).
  for (const LayerFactor* next : {&low2, &full}) {
    std::vector<float> h = add;
    ASSERT_OK(host_.transforms().Reproject(low1, *next, h.data(), kRows));
    auto d = dev_->memory().NewBuffer();
    Upload(*d, add);
    ASSERT_OK(dev_->transforms().Reproject(low1, *next, d->floats(), kRows));
    EXPECT_LT(rel(Download<float>(*d, x.size()), h), 1e-5);
  }
  BucketLayer layer{.name = "w", .shape = {kRows, kD}};
  ProbeResult hp, dp;
  ASSERT_OK(host_.probe().Probe(x.data(), layer, low1, &hp));
  ASSERT_OK(dev_->probe().Probe(dx->floats(), layer, low1, &dp));
  EXPECT_GT(hp.euclid_rel_l2, 0.0);
  EXPECT_NEAR(dp.euclid_rel_l2, hp.euclid_rel_l2, 1e-9);
  EXPECT_NEAR(dp.gift_rel_l2, hp.gift_rel_l2, 1e-3 * hp.gift_rel_l2);
}

TEST_F(DeviceBackendTest, ControlCommunicatorStagesHostBuffers) {
  Transport* control = dev_->control();
  ASSERT_NE(control, nullptr);
  EXPECT_EQ(control->memory_kind(), MemoryKind::kHost);
  std::vector<int64_t> v = {7, -3, int64_t{1} << 40};
  const std::vector<int64_t> want = v;
  ASSERT_OK(control->AllReduce(v.data(), v.data(), v.size(), DataType::kInt64,
                               ReduceOp::kMin));
  EXPECT_EQ(v, want);
  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8}, got(8, 0xEE);
  const std::vector<size_t> n = {5}, so = {2}, ro = {1};
  ASSERT_OK(control->AllToAllV(bytes.data(), n, so, got.data(), n, ro));
  EXPECT_EQ(got, (std::vector<uint8_t>{0xEE, 3, 4, 5, 6, 7, 0xEE, 0xEE}));
  std::vector<uint8_t> gathered(8, 0);
  const std::vector<size_t> sizes = {8};
  ASSERT_OK(control->AllGatherV(bytes.data(), 8, gathered.data(), sizes));
  EXPECT_EQ(gathered, bytes);
  ASSERT_OK(control->Broadcast(bytes.data(), 8, 0));
  ASSERT_OK(control->Barrier());
  EXPECT_FALSE(control->SetStream(reinterpret_cast<void*>(1)).ok());
}

// ---- multi-process: device_allreduce_worker ----

constexpr int kExitDuplicateGpu = 3;

void RunWorker(int world_size) {
  if (!gpu::Available()) GTEST_SKIP() << "no GPU";
  multiprocess::LaunchOptions launch;
  launch.binary = GIFT_DEVICE_ALLREDUCE_WORKER;
  launch.world_size = world_size;
  launch.deadline = absl::Seconds(240);
  absl::StatusOr<multiprocess::RunResult> run = multiprocess::RunRanks(launch);
  ASSERT_OK(run);
  const std::string what = multiprocess::Describe(*run);
  if (world_size > 1 && run->ranks[0].exit_code == kExitDuplicateGpu) {
    GTEST_SKIP() << "NCCL refuses " << world_size
                 << " ranks on one GPU: " << run->ranks[0].report;
  }
  std::string hashes;
  for (const multiprocess::RankResult& r : run->ranks) {
    ASSERT_EQ(r.exit_code, 0)
        << "rank " << r.rank << " failed (1: a check, see its stderr above; "
        << "2: setup; 3: duplicate GPU): " << what;
    ASSERT_THAT(r.report, ::testing::StartsWith("hash=")) << what;
    // fp8 x4, fp32, bf16, and nccl-fp8 on sm_90.
    EXPECT_GE(std::vector<std::string>(
                  absl::StrSplit(r.report, ',', absl::SkipEmpty()))
                  .size(),
              6u)
        << r.report;
    if (r.rank == 0) hashes = r.report;
    EXPECT_EQ(r.report, hashes)
        << "rank " << r.rank << " device results differ from rank 0's";
  }
}

TEST(DeviceAllReduceRanks, OneRankMatchesHostPath) { RunWorker(1); }
TEST(DeviceAllReduceRanks, TwoRanksOnOneGpu) { RunWorker(2); }
TEST(DeviceAllReduceRanks, FourRanksOnOneGpu) { RunWorker(4); }

}  // namespace
}  // namespace gift::client
