// A layer's wire format changed through giftd (SetLayerPolicy) at run time:
// two Gloo ranks in threads go e4m3 → nvfp4 → mxfp4 on the Euclidean path.
// Each change is a new plan epoch that both ranks switch to in the same
// step, and the Euclidean error-feedback residual built under nvfp4 is
// carried into the first mxfp4 step (that step differs from the same step
// with the residual dropped, and equals it with the residual kept). Also a
// plan with a format code out of range, which the rank refuses, and a run
// of plans faster than the ranks agree on them.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/allreduce_engine.h"
#include "client/giftd_connection.h"
#include "client/giftd_testutil.h"
#include "client/thread_ranks_testutil.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "gtest/gtest.h"
#include "kernels/wire_format.h"
#include "shm/protocol.h"
#include "shm/region.h"

namespace gift::client {
namespace {

using kernels::Fp4Format;
using kernels::WireFormat;

struct Step {
  int64_t epoch;
  int format;  // WireFormat code of "w" in the step's epoch
};

// The format of "w" in the epoch the last Run used.
int FormatInUse(const AllReduceState& s) {
  for (const EpochPlan& p : s.plans) {
    if (p.epoch() != s.current_epoch) continue;
    for (const BucketLayer& l : p.layers()) {
      if (l.name == "w") return l.format.code();
    }
  }
  return -1;
}

const std::vector<float>* EuclidResidual(const AllReduceState& s) {
  for (const AllReduceState::EuclidLayer& l : s.euclid_layers) {
    if (l.name == "w") return &l.residual;
  }
  return nullptr;
}

class Ranks {
 public:
  explicit Ranks(const std::string& socket)
      : steps_(2), thread_([this, socket] {
          RunThreadRanks(2, [&](Transport& comm) { Rank(socket, comm); });
        }) {}
  ~Ranks() { Stop(); }
  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Waits (60 s at most) until both ranks ran `n` steps in format `code`.
  bool WaitForSteps(int code, int n) {
    return gift::testing::WaitUntil(
        [&] {
          absl::MutexLock lock(&mu_);
          for (const std::vector<Step>& r : steps_) {
            if (std::count_if(r.begin(), r.end(), [&](const Step& s) {
                  return s.format == code;
                }) < n) {
              return false;
            }
          }
          return true;
        },
        absl::Seconds(60), absl::Milliseconds(10));
  }
  std::vector<std::vector<Step>> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  int switches_checked() const { return switches_checked_; }

 private:
  void Rank(const std::string& socket, Transport& comm) {
    absl::StatusOr<TestRank> r =
        TestRank::Open(socket, "format-test", comm, /*world_size=*/2);
    ASSERT_OK(r);
    auto& [att, ar, factors] = *r;
    std::vector<float> acts, x;
    int last = WireFormat(kernels::Fp8Format::kE4M3).code();
    for (int64_t step = 0; step < 20000; ++step) {
      int64_t stop = done_ ? 1 : 0;
      ASSERT_OK(
          comm.AllReduce(&stop, &stop, 1, DataType::kInt64, ReduceOp::kMax));
      if (stop != 0) break;
      MakeStep(comm.rank(), step, &acts, &x);
      ASSERT_OK(att->BeforeStep(ar.get(), &factors));
      absl::StatusOr<AllReduceState> before = ar->ExportState();
      ASSERT_OK(before);
      const std::vector<float> input = x;
      StepTelemetry t;
      ASSERT_OK(ar->Run(x.data(), factors, &t));
      ASSERT_OK(att->AfterStep(*ar, t, 0.001));
      absl::StatusOr<AllReduceState> after = ar->ExportState();
      ASSERT_OK(after);
      const int code = FormatInUse(*after);
      // Collective, so that both ranks check together even if only one
      // switched (which the records then show).
      int64_t switched = last == WireFormat(Fp4Format::kNvfp4).code() &&
                         code == WireFormat(Fp4Format::kMxfp4).code();
      ASSERT_OK(comm.AllReduce(&switched, &switched, 1, DataType::kInt64,
                               ReduceOp::kMax));
      if (switched != 0) CheckCarried(comm, *before, input, x);
      last = code;
      absl::MutexLock lock(&mu_);
      steps_[comm.rank()].push_back({t.plan_epoch, code});
      absl::SleepFor(absl::Milliseconds(2));
    }
  }

  // The first mxfp4 step again from the state before it: with the nvfp4
  // residual it gives `got` bit for bit, without it something else.
  void CheckCarried(Transport& comm, const AllReduceState& before,
                    const std::vector<float>& input,
                    const std::vector<float>& got) {
    const std::vector<float>* r = EuclidResidual(before);
    ASSERT_NE(r, nullptr) << "no Euclidean residual under nvfp4";
    EXPECT_TRUE(
        std::any_of(r->begin(), r->end(), [](float v) { return v != 0.0f; }));
    AllReduceState dropped = before;
    dropped.euclid_layers.clear();
    std::vector<float> with, without;
    for (const AllReduceState* s :
         {&before, static_cast<const AllReduceState*>(&dropped)}) {
      auto ref = AllReduceEngine::Create(&comm, s->plans.front(), {});
      ASSERT_OK(ref);
      ASSERT_OK((*ref)->ImportState(*s));
      std::vector<float> y = input;
      ASSERT_OK((*ref)->Run(y.data(), VersionedFactors(), nullptr));
      (s == &before ? with : without) = std::move(y);
    }
    EXPECT_EQ(with, got);
    EXPECT_NE(without, got);
    ++switches_checked_;
  }

  absl::Mutex mu_;
  std::vector<std::vector<Step>> steps_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> done_{false};
  std::atomic<int> switches_checked_{0};
  std::thread thread_;  // last: started once the rest is set up
};

TEST(GiftdFormatTest, AFormatChangeIsAgreedAndCarriesTheResidual) {
  gift::testing::TempDir tmp("gift_format");
  ASSERT_TRUE(tmp.ok());
  const std::string socket = absl::StrCat(tmp.path(), "/agent.sock");
  const std::string prefix = absl::StrCat("/gift-fmt", ::getpid());
  Giftd giftd(socket, prefix);
  Ranks ranks(socket);
  v1::LayerSettings s;
  s.set_pin(v1::PIN_OUT);  // Euclidean throughout
  ASSERT_GT(giftd.Set("w", s), 0);
  ASSERT_TRUE(ranks.WaitForSteps(WireFormat().code(), 3));
  s.set_format(v1::WIRE_FORMAT_NVFP4);
  const int64_t nvfp4 = giftd.Set("w", s);
  ASSERT_TRUE(ranks.WaitForSteps(WireFormat(Fp4Format::kNvfp4).code(), 5))
      << "nvfp4 never reached both ranks";
  s.set_format(v1::WIRE_FORMAT_MXFP4);
  const int64_t mxfp4 = giftd.Set("w", s);
  EXPECT_GT(mxfp4, nvfp4);
  ASSERT_TRUE(ranks.WaitForSteps(WireFormat(Fp4Format::kMxfp4).code(), 3))
      << "mxfp4 never reached both ranks";
  // ListLayers and the metrics show the format and the bytes sent.
  EXPECT_TRUE(gift::testing::WaitUntil(
      [&] {
        absl::StatusOr<v1::ListLayersResponse> l =
            giftd.core().ListLayers(v1::ListLayersRequest());
        return l.ok() && l->layers(0).bytes_sent() > 0 &&
               l->layers(0).settings().format() == v1::WIRE_FORMAT_MXFP4;
      },
      absl::Seconds(20), absl::Milliseconds(10)));
  EXPECT_TRUE(gift::testing::WaitUntil(
      [&] {
        const std::string text = giftd.MetricsText();
        return absl::StrContains(text,
                                 "gift_layer_format_info{format=\"mxfp4\"") &&
               !absl::StrContains(text,
                                  "gift_layer_format_info{format=\"nvfp4\"") &&
               absl::StrContains(text, "gift_layer_bytes_sent_total{");
      },
      absl::Seconds(20), absl::Milliseconds(10)))
      << giftd.MetricsText();
  ranks.Stop();
  EXPECT_EQ(ranks.switches_checked(), 2);  // once on each rank

  const std::vector<std::vector<Step>> steps = ranks.steps();
  const size_t n = std::min(steps[0].size(), steps[1].size());
  ASSERT_GT(n, 0u);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(steps[0][i].epoch, steps[1][i].epoch) << "step " << i;
    EXPECT_EQ(steps[0][i].format, steps[1][i].format) << "step " << i;
  }
  // The formats follow the epochs the daemon answered with.
  for (const Step& st : steps[0]) {
    if (st.epoch >= mxfp4) {
      EXPECT_EQ(st.format, WireFormat(Fp4Format::kMxfp4).code());
    } else if (st.epoch >= nvfp4) {
      EXPECT_EQ(st.format, WireFormat(Fp4Format::kNvfp4).code());
    }
  }
}

// The shared block is untrusted: a plan epoch naming a format code outside
// 0..3 (or one the layer's shape cannot take) is refused with a note; the
// rank keeps its connection and the epoch in use.
TEST(GiftdFormatTest, APlanWithABadFormatCodeIsRefused) {
  gift::testing::TempDir tmp("gift_format");
  ASSERT_TRUE(tmp.ok());
  const std::string socket = absl::StrCat(tmp.path(), "/agent.sock");
  const std::string prefix = absl::StrCat("/gift-badfmt", ::getpid());
  Giftd giftd(socket, prefix);
  RunThreadRanks(1, [&](Transport& comm) {
    // d_in 40: no 4-bit format fits.
    absl::StatusOr<EpochPlan> plan = EpochPlan::Create(
        0, 32 * 40, {{.name = "w", .shape = {32, 40}, .offset = 0}});
    ASSERT_OK(plan);
    ConnectionOptions o;
    o.agent_socket = socket;
    o.job_id = "badfmt-test";
    o.rank = 0;
    o.world_size = 1;
    auto att = GiftdConnection::Create(o, *plan);
    ASSERT_OK(att);
    ASSERT_TRUE((*att)->stats().attached);
    auto ar = AllReduceEngine::Create(&comm, *plan, {});
    ASSERT_OK(ar);
    VersionedFactors factors;
    std::vector<float> x(32 * 40, 0.5f);
    ASSERT_OK((*att)->BeforeStep(ar->get(), &factors));
    ASSERT_OK((*ar)->Run(x.data(), factors, nullptr));
    const int64_t epoch = (*ar)->current_epoch();
    ASSERT_GT(epoch, 0);
    // The rank's control block, written as a broken daemon would.
    absl::StatusOr<std::vector<std::unique_ptr<shm::Region>>> blocks =
        OpenControlBlocks(prefix);
    ASSERT_OK(blocks);
    ASSERT_EQ(blocks->size(), 1u);
    const std::unique_ptr<shm::Region>& block = blocks->front();
    for (const auto& [code, why] : std::vector<std::pair<int, std::string>>{
             {7, "layer w: format code 7 is none of 0..3"},
             {WireFormat(Fp4Format::kNvfp4).code(),
              "layer w: nvfp4 scales blocks of 16"}}) {
      shm::PlanView bad;
      ASSERT_TRUE(shm::ReadPlan(block->data(), &bad));
      bad.plan_epoch += 10;
      bad.layers[0].format = static_cast<uint8_t>(code);
      shm::PublishPlan(block->data(), bad);
      ASSERT_OK((*att)->BeforeStep(ar->get(), &factors));
      ASSERT_OK((*ar)->Run(x.data(), factors, nullptr));
      const ConnectionStats s = (*att)->stats();
      EXPECT_TRUE(s.attached);
      EXPECT_THAT(s.last_error, ::testing::HasSubstr(why));
      EXPECT_THAT(s.last_error,
                  ::testing::HasSubstr(absl::StrCat("keeping epoch ", epoch)));
      EXPECT_EQ((*ar)->current_epoch(), epoch);
    }
  });
}

// Plans may come faster than the ranks agree on them: a rank switches only
// to an epoch every rank holds, so when one rank takes newer epochs than
// the other, the job stays on the epoch in use. The rank must keep that
// plan (its sketch windows, refresh interval and telemetry follow it) however
// many newer ones it takes meanwhile. Here rank 0's block gets a new
// epoch every step, until rank 0 applied six, that rank 1 never sees: rank 0
// stays on the agreed epoch and still knows its plan (before, it kept only its
// four newest plans, lost the agreed one and stopped stepping its sketch
// windows).
TEST(GiftdFormatTest, TheEpochInUseStaysKnownWhileNewerPlansArrive) {
  gift::testing::TempDir tmp("gift_format");
  ASSERT_TRUE(tmp.ok());
  const std::string socket = absl::StrCat(tmp.path(), "/agent.sock");
  const std::string prefix = absl::StrCat("/gift-held", ::getpid());
  Giftd giftd(socket, prefix);
  RunThreadRanks(2, [&](Transport& comm) {
    absl::StatusOr<TestRank> r =
        TestRank::Open(socket, "held-test", comm, /*world_size=*/2);
    ASSERT_OK(r);
    auto& [att, ar, factors] = *r;
    std::vector<float> acts, x;
    auto step = [&](int64_t i) {
      MakeStep(comm.rank(), i, &acts, &x);
      StepTelemetry t;
      ASSERT_OK(r->Step(acts, /*sketch=*/false, &x, &t));
    };
    // Until both ranks run giftd's plan (collective: both stop together).
    int64_t i = 0;
    for (int64_t agreed = 0; agreed < 2 && i < 20000; ++i) {
      ASSERT_NO_FATAL_FAILURE(step(i));
      agreed = att->stats().current_refresh_interval > 0;
      ASSERT_OK(comm.AllReduce(&agreed, &agreed, 1, DataType::kInt64,
                               ReduceOp::kSum));
      absl::SleepFor(absl::Milliseconds(2));
    }
    const int64_t interval = att->stats().current_refresh_interval;
    ASSERT_GT(ar->current_epoch(), 0);
    ASSERT_EQ(interval, 4);  // the Giftd helper's
    absl::StatusOr<std::vector<std::unique_ptr<shm::Region>>> blocks =
        OpenControlBlocks(prefix);
    ASSERT_OK(blocks);
    shm::Region* mine = nullptr;
    for (const auto& b : *blocks) {
      if (shm::Header(b->data())->rank == comm.rank()) mine = b.get();
    }
    ASSERT_NE(mine, nullptr);
    shm::PlanView next;
    ASSERT_TRUE(shm::ReadPlan(mine->data(), &next));
    const int64_t first_mine = next.plan_epoch + 1000;
    // Until rank 0 applied 6 more plans (collective). Not a fixed 6 steps:
    // giftd's own epoch can overwrite one of ours before rank 0 reads it.
    const int64_t applied_before = att->stats().plans_applied;
    int64_t applied6 = 0;
    for (int n = 0; applied6 == 0 && n < 60; ++n, ++i) {
      if (comm.rank() == 0) {
        next.plan_epoch += 1000;  // far above giftd's own epochs
        shm::PublishPlan(mine->data(), next);
      }
      ASSERT_NO_FATAL_FAILURE(step(i));
      // giftd may publish an epoch of its own meanwhile; never one of ours.
      EXPECT_LT(ar->current_epoch(), first_mine) << "step " << i;
      const ConnectionStats s = att->stats();
      EXPECT_EQ(s.current_epoch, ar->current_epoch()) << "step " << i;
      EXPECT_EQ(s.current_refresh_interval, interval)
          << "rank " << comm.rank() << " lost the plan of the epoch in use at "
          << "step " << i;
      applied6 = s.plans_applied - applied_before >= 6;
      ASSERT_OK(comm.AllReduce(&applied6, &applied6, 1, DataType::kInt64,
                               ReduceOp::kMax));
    }
    EXPECT_EQ(applied6, 1) << "rank 0 applied fewer than 6 plans in 60 steps";
    // Ours went to rank 0's block only: rank 1 saw at most giftd's epochs.
    EXPECT_EQ(att->stats().plans_applied - applied_before >= 6,
              comm.rank() == 0);
  });
}

}  // namespace
}  // namespace gift::client
