// The public C++ API of libgift (include/gift/*.h), linked against
// libgift.so alone: Status, BucketPlan validation and epochs, the
// communicator factory's errors, and the quantized allreduce on 2 ranks
// (threads) in fp8 with its StepStats, with a GIFT factor, and in bf16.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gift/gift.h"
#include "tests/api/api_testutil.h"

namespace {

using gift::AllReduceMode;
using gift::BucketPlan;
using gift::Communicator;
using gift::CommunicatorOptions;
using gift::LayerPath;
using gift::LayerSpec;
using gift::QuantizedAllReduce;
using gift::Status;
using gift::StatusCode;
using gift::testing::Gradient;
using gift::testing::RelL2;
using gift::testing::RunRanks;
using gift::testing::TempDir;

std::vector<LayerSpec> Layers() {
  LayerSpec w;
  w.name = "w";
  w.shape = {32, 16};
  w.offset = 0;
  LayerSpec b;
  b.name = "b";
  b.shape = {32};
  b.offset = 512;
  return {w, b};
}

constexpr int64_t kBucket = 544;

BucketPlan Plan(int64_t epoch = 0) {
  BucketPlan plan;
  const Status s = BucketPlan::Create(epoch, kBucket, Layers(), &plan);
  EXPECT_TRUE(s.ok()) << s;
  return plan;
}

std::shared_ptr<Communicator> Connect(int rank, int world,
                                      const std::string& dir) {
  CommunicatorOptions o;
  o.rank = rank;
  o.world_size = world;
  o.store_dir = dir;
  o.hostname = "127.0.0.1";
  o.timeout_seconds = 30;
  std::shared_ptr<Communicator> comm;
  const Status s = Communicator::Create(o, &comm);
  EXPECT_TRUE(s.ok()) << s;
  return comm;
}

TEST(CppApiTest, Status) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().ToString(), "OK");
  const Status s(StatusCode::kNotFound, "no such layer");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no such layer");
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), "NOT_FOUND: no such layer");
  EXPECT_EQ(Status(StatusCode::kOk, "dropped").message(), "");
  EXPECT_EQ(s, Status(StatusCode::kNotFound, "no such layer"));
  EXPECT_NE(s, Status());
  EXPECT_STREQ(gift::StatusCodeName(StatusCode::kDeadlineExceeded),
               "DEADLINE_EXCEEDED");
  EXPECT_STREQ(gift::StatusCodeName(static_cast<StatusCode>(42)), "UNKNOWN");
}

TEST(CppApiTest, BucketPlanValidation) {
  BucketPlan plan = Plan();
  ASSERT_TRUE(plan.valid());
  EXPECT_EQ(plan.bucket_elements(), kBucket);
  EXPECT_EQ(plan.communicated_elements(), 544);
  ASSERT_EQ(plan.layers().size(), 2u);
  EXPECT_EQ(plan.layers()[1].name, "b");
  EXPECT_EQ(plan.FindLayer("b"), 1);
  EXPECT_EQ(plan.FindLayer("x"), -1);
  const BucketPlan copy = plan;  // shares the data
  EXPECT_EQ(copy.fingerprint(), plan.fingerprint());
  EXPECT_TRUE(copy.SameLayout(plan));

  BucketPlan empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_TRUE(empty.layers().empty());
  EXPECT_EQ(empty.FindLayer("w"), -1);
  EXPECT_FALSE(empty.SameLayout(plan));

  std::vector<LayerSpec> bad = Layers();
  bad[0].path = static_cast<LayerPath>(7);
  BucketPlan out;
  Status s = BucketPlan::Create(0, kBucket, bad, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w': unknown enum value"), std::string::npos)
      << s;
  EXPECT_FALSE(out.valid());  // untouched
  bad = Layers();
  bad[0].shape = {int64_t{1} << 33, int64_t{1} << 33};
  s = BucketPlan::Create(0, kBucket, bad, &out);
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s;
  bad = Layers();
  bad[1].offset = 500;
  s = BucketPlan::Create(0, kBucket, bad, &out);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s;
  EXPECT_EQ(BucketPlan::Create(0, kBucket, Layers(), nullptr).code(),
            StatusCode::kInvalidArgument);

  BucketPlan epoch1;
  ASSERT_TRUE(plan.WithGiftLayers(1, {"w"}, &epoch1).ok());
  EXPECT_EQ(epoch1.epoch(), 1);
  EXPECT_EQ(epoch1.layers()[0].path, LayerPath::kGift);
  EXPECT_EQ(epoch1.layers()[1].path, LayerPath::kEuclid);
  EXPECT_TRUE(epoch1.SameLayout(plan));
  EXPECT_NE(epoch1.fingerprint(), plan.fingerprint());
  s = plan.WithGiftLayers(1, {"b"}, &out);
  EXPECT_NE(s.message().find("2-D"), std::string::npos) << s;
  s = plan.WithGiftLayers(1, {"nope"}, &out);
  EXPECT_NE(s.message().find("unknown layer 'nope'"), std::string::npos) << s;
  s = empty.WithGiftLayers(1, {}, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(CppApiTest, ModesAndBackends) {
  AllReduceMode m = AllReduceMode::kFp8;
  ASSERT_TRUE(gift::ParseAllReduceMode("bf16", &m).ok());
  EXPECT_EQ(m, AllReduceMode::kBf16);
  EXPECT_STREQ(gift::AllReduceModeName(AllReduceMode::kNcclFp8), "nccl-fp8");
  const Status s = gift::ParseAllReduceMode("fp4", &m);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fp8, fp32, bf16, nccl-fp8"), std::string::npos);
  EXPECT_STREQ(gift::BackendName(gift::Backend::kNccl), "nccl");
}

TEST(CppApiTest, CommunicatorErrors) {
  TempDir dir("gift_api_test");
  std::shared_ptr<Communicator> comm;
  CommunicatorOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.store_dir = dir.path();
  o.socket_ifname = "gift-no-such-if0";
  Status s = Communicator::Create(o, &comm);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("gift-no-such-if0"), std::string::npos) << s;
  EXPECT_EQ(comm, nullptr);
  o.socket_ifname.clear();
  o.backend = static_cast<gift::Backend>(5);
  s = Communicator::Create(o, &comm);
  EXPECT_NE(s.message().find("unknown backend 5"), std::string::npos) << s;
  // NCCL: a CPU build says so; a CUDA build on this machine finds no GPU
  // or no peer in time. Either way: an error, not a crash.
  o.backend = gift::Backend::kNccl;
  o.timeout_seconds = 5;
  s = Communicator::Create(o, &comm);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(Communicator::Create(o, nullptr).code(),
            StatusCode::kInvalidArgument);

  o.backend = gift::Backend::kGloo;
  o.hostname = "127.0.0.1";
  ASSERT_TRUE(Communicator::Create(o, &comm).ok());
  EXPECT_EQ(comm->backend(), gift::Backend::kGloo);
  EXPECT_FALSE(comm->device_memory());
  EXPECT_NE(comm->endpoint().find("127.0.0.1"), std::string::npos);
  EXPECT_EQ(comm->SetTimeout(0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm->SetTimeout(10).ok());
  EXPECT_TRUE(comm->Barrier().ok());

  std::unique_ptr<QuantizedAllReduce> ar;
  EXPECT_EQ(QuantizedAllReduce::Create(nullptr, Plan(), {}, &ar).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizedAllReduce::Create(comm, BucketPlan(), {}, &ar).code(),
            StatusCode::kInvalidArgument);
  gift::AllReduceOptions bad;
  bad.piece_bytes = 2;
  EXPECT_EQ(QuantizedAllReduce::Create(comm, Plan(), bad, &ar).code(),
            StatusCode::kInvalidArgument);
  gift::AllReduceOptions bad_feedback;
  bad_feedback.euclid_error_feedback = static_cast<gift::EuclidFeedback>(3);
  EXPECT_EQ(QuantizedAllReduce::Create(comm, Plan(), bad_feedback, &ar).code(),
            StatusCode::kInvalidArgument);
  gift::AllReduceOptions feedback_on;
  feedback_on.euclid_error_feedback = gift::EuclidFeedback::kOn;
  EXPECT_TRUE(QuantizedAllReduce::Create(comm, Plan(), feedback_on, &ar).ok());
  ar.reset();
  gift::AllReduceOptions nccl_fp8;
  nccl_fp8.mode = AllReduceMode::kNcclFp8;
  s = QuantizedAllReduce::Create(comm, Plan(), nccl_fp8, &ar);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ar, nullptr);
}

// fp8 on two ranks with a GIFT epoch and a factor: stats, bit-identical
// results, error against the exact average; then bf16.
TEST(CppApiTest, AllReduceOnTwoRanks) {
  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<gift::StepStats> stats(kWorld);
  RunRanks(kWorld, [&](int rank) {
    std::shared_ptr<Communicator> comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    std::unique_ptr<QuantizedAllReduce> ar;
    Status s = QuantizedAllReduce::Create(comm, Plan(), {}, &ar);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(ar->communicator(), comm);
    EXPECT_EQ(ar->options().mode, AllReduceMode::kFp8);
    EXPECT_EQ(ar->stream(), nullptr);

    gift::GiftFactor f;
    f.version = 4;
    f.d_in = 16;
    f.r = 1;
    f.u.assign(16, 0.25f);  // unit vector
    f.c = {-0.5f};
    f.c_inv = {1.0f};
    gift::GiftFactor wrong = f;
    wrong.d_in = 15;
    s = ar->PutFactor("w", wrong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(ar->PutFactor("b", f).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(ar->PutFactor("w", f).ok());
    BucketPlan epoch1;
    ASSERT_TRUE(ar->plan().WithGiftLayers(1, {"w"}, &epoch1).ok());
    ASSERT_TRUE(ar->AddPlan(epoch1).ok());

    std::vector<float> grad = Gradient(rank, kBucket, 7);
    s = ar->Step(grad.data(), grad.size() + 1);
    EXPECT_NE(s.message().find("the bucket has 545 floats, the plan needs 544"),
              std::string::npos)
        << s;
    s = ar->Step(grad.data(), grad.size(), &stats[rank]);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(ar->steps(), 1);
    EXPECT_EQ(ar->current_epoch(), 1);
    results[rank] = grad;

    // bf16 on the same communicator: a second allreduce.
    gift::AllReduceOptions bf16;
    bf16.mode = AllReduceMode::kBf16;
    std::unique_ptr<QuantizedAllReduce> b;
    ASSERT_TRUE(QuantizedAllReduce::Create(comm, Plan(), bf16, &b).ok());
    std::vector<float> g2 = Gradient(rank, kBucket, 8);
    ASSERT_TRUE(b->Step(g2.data(), g2.size()).ok());
    const std::vector<float> a0 = Gradient(0, kBucket, 8);
    const std::vector<float> a1 = Gradient(1, kBucket, 8);
    std::vector<float> exact(kBucket);
    for (int64_t i = 0; i < kBucket; ++i) exact[i] = (a0[i] + a1[i]) / 2;
    EXPECT_LT(RelL2(g2, exact, 0, kBucket), 0.01);
    EXPECT_GT(RelL2(g2, exact, 0, kBucket), 1e-5);
  });
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBucket));
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(),
                        kBucket * sizeof(float)),
            0);
  std::vector<float> exact(kBucket);
  const std::vector<float> a0 = Gradient(0, kBucket, 7);
  const std::vector<float> a1 = Gradient(1, kBucket, 7);
  for (int64_t i = 0; i < kBucket; ++i) exact[i] = (a0[i] + a1[i]) / 2;
  EXPECT_LT(RelL2(results[0], exact, 0, kBucket), 0.06);
  EXPECT_GT(RelL2(results[0], exact, 0, kBucket), 1e-4);
  for (const gift::StepStats& st : stats) {
    EXPECT_EQ(st.step, 0);
    EXPECT_EQ(st.plan_epoch, 1);
    EXPECT_TRUE(st.probe_step);  // step 0 probes
    ASSERT_EQ(st.layers.size(), 2u);
    EXPECT_EQ(st.layers[0].name, "w");
    EXPECT_EQ(st.layers[0].path, LayerPath::kGift);
    EXPECT_EQ(st.layers[0].factor_version, 4);
    EXPECT_TRUE(st.layers[0].probed);
    EXPECT_GT(st.layers[0].probe_euclid_rel_l2, 0);
    EXPECT_EQ(st.layers[1].path, LayerPath::kEuclid);
    EXPECT_GT(st.bytes_gift, 0u);
    EXPECT_GT(st.bytes_euclid, 0u);
    EXPECT_GT(st.seconds, 0);
  }
}

// The 4-bit formats through the public plan: stable values, validated
// against the shape, and sent as 4 bits (fewer bytes than E4M3, the same
// result on every rank).
TEST(CppApiTest, FourBitFormatsOnTwoRanks) {
  static_assert(static_cast<int>(gift::WireFormat::kNvfp4) == 2 &&
                static_cast<int>(gift::WireFormat::kMxfp4) == 3);
  static_assert(gift::Fp8Format::kE5M2 == gift::WireFormat::kE5M2);
  std::vector<LayerSpec> layers = Layers();
  layers[0].format = gift::WireFormat::kMxfp4;  // d_in 16: no 32-blocks
  BucketPlan plan;
  Status s = BucketPlan::Create(0, kBucket, layers, &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s;
  layers[0].format = gift::WireFormat::kNvfp4;
  layers[1].format = gift::WireFormat::kMxfp4;  // 1-D: a ragged block
  ASSERT_TRUE(BucketPlan::Create(0, kBucket, layers, &plan).ok());
  EXPECT_EQ(plan.layers()[0].format, gift::WireFormat::kNvfp4);
  EXPECT_EQ(plan.layers()[1].format, gift::WireFormat::kMxfp4);
  EXPECT_NE(plan.fingerprint(), Plan().fingerprint());

  TempDir dir("gift_api_test");
  constexpr int kWorld = 2;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<uint64_t> bytes4(kWorld), bytes8(kWorld);
  RunRanks(kWorld, [&](int rank) {
    std::shared_ptr<Communicator> comm = Connect(rank, kWorld, dir.path());
    ASSERT_NE(comm, nullptr);
    for (const BucketPlan& p : {plan, Plan()}) {
      std::unique_ptr<QuantizedAllReduce> ar;
      ASSERT_TRUE(QuantizedAllReduce::Create(comm, p, {}, &ar).ok());
      std::vector<float> grad = Gradient(rank, kBucket, 9);
      gift::StepStats st;
      Status r = ar->Step(grad.data(), grad.size(), &st);
      ASSERT_TRUE(r.ok()) << r;
      const bool four = p.layers()[0].format == gift::WireFormat::kNvfp4;
      (four ? bytes4 : bytes8)[rank] = st.bytes_euclid;
      if (four) results[rank] = grad;
    }
  });
  ASSERT_EQ(results[0].size(), static_cast<size_t>(kBucket));
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(),
                        kBucket * sizeof(float)),
            0);
  std::vector<float> exact(kBucket);
  const std::vector<float> a0 = Gradient(0, kBucket, 9);
  const std::vector<float> a1 = Gradient(1, kBucket, 9);
  for (int64_t i = 0; i < kBucket; ++i) exact[i] = (a0[i] + a1[i]) / 2;
  EXPECT_LT(RelL2(results[0], exact, 0, kBucket), 0.3);
  EXPECT_GT(RelL2(results[0], exact, 0, kBucket), 1e-3);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_GT(bytes4[rank], 0u);
    EXPECT_LT(bytes4[rank], bytes8[rank]) << rank;
  }
}

TEST(CppApiTest, AttachRequiresTheLayout) {
  TempDir dir("gift_api_test");
  std::shared_ptr<Communicator> comm = Connect(0, 1, dir.Sub("store"));
  ASSERT_NE(comm, nullptr);
  std::unique_ptr<QuantizedAllReduce> ar;
  ASSERT_TRUE(QuantizedAllReduce::Create(comm, Plan(), {}, &ar).ok());
  gift::AttachmentOptions o;
  o.agent_socket = dir.Sub("none.sock");
  o.job_id = "cpp-api-test";
  o.rank = 0;
  o.world_size = 1;
  o.retry_interval_seconds = 3600;
  std::shared_ptr<gift::DaemonAttachment> att;
  ASSERT_TRUE(gift::DaemonAttachment::Create(o, Plan(), &att).ok());
  EXPECT_FALSE(att->stats().attached);
  EXPECT_EQ(att->base_plan().fingerprint(), Plan().fingerprint());
  ASSERT_TRUE(ar->Attach(att).ok());
  std::vector<float> g = Gradient(0, kBucket);
  ASSERT_TRUE(ar->Step(g.data(), g.size()).ok());
  ASSERT_TRUE(ar->BeginStep().ok());
  EXPECT_EQ(ar->Attach(nullptr).code(), StatusCode::kFailedPrecondition);
  gift::BucketLayout whole;
  whole.layers = {0, 1};
  whole.offsets = {0, 512};
  whole.elements = kBucket;
  ASSERT_TRUE(ar->ReduceBucket(whole, g.data(), g.size()).ok());
  ASSERT_TRUE(ar->EndStep().ok());
  EXPECT_TRUE(ar->Attach(nullptr).ok());
  o.rank = 3;
  Status s = gift::DaemonAttachment::Create(o, Plan(), &att);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(att, nullptr);
}

}  // namespace
