// One rank of the network-namespace allreduce test, started by RunRanks
// through `scripts/netns.sh exec - ...`, so it runs inside its own namespace
// with GIFT_NETNS_ADDR set to its veth address; Gloo listens there, so every
// byte between ranks crosses the veths and the bridge.
//
// Two fp8 steps on a ~4 MiB bucket (Euclidean E4M3 / E5M2 layers, per-layer
// and block scales, a rank-32 low-rank GIFT layer): step 0 within the FP8
// error bound (tests/multiprocess/allreduce_check.h), the payload about a
// 1-byte ring. Reports "hash=H0,H1 addr=A netns=N" for the parent to compare
// across ranks. Exit 0 when every check passes, 1 on a failed check, 2 on
// setup errors.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/allreduce_engine.h"
#include "client/synthetic_testutil.h"
#include "client/transport_factory.h"
#include "tests/multiprocess/allreduce_check.h"
#include "tests/multiprocess/harness.h"

namespace gift::multiprocess {
namespace {

using client::BucketLayer;
using client::EpochPlan;
using client::LayerPath;

constexpr int kExitCheckFailed = 1;
constexpr int kExitSetup = 2;
constexpr int kGiftLayer = 3;

EpochPlan NetnsPlan() {
  std::vector<BucketLayer> l = {
      {.name = "attn.w", .shape = {512, 512}, .offset = 0},
      {.name = "attn.b", .shape = {512}, .offset = 262144},
      {.name = "fc1.w",
       .shape = {1024, 512},
       .offset = 262656,
       .block_size = 4096},
      {.name = "fc2.w",
       .shape = {256, 1024},
       .offset = 786944,
       .path = LayerPath::kGift},
      {.name = "ln.w",
       .shape = {511},
       .offset = 1049088,
       .format = kernels::Fp8Format::kE5M2},
  };
  return *EpochPlan::Create(1, 1049599, std::move(l));
}

int Fail(int rank, const std::string& what) {
  std::cerr << "rank " << rank << ": FAILED: " << what << std::endl;
  return kExitCheckFailed;
}

int Run(client::Transport& comm, const RankEnv& env, const std::string& addr) {
  const int w = comm.world_size(), me = comm.rank();
  const EpochPlan plan = NetnsPlan();
  auto ar = client::AllReduceEngine::Create(&comm, plan, {});
  if (!ar.ok()) return Fail(me, ar.status().ToString());
  client::VersionedFactors f;
  const client::LayerFactor g = client::SyntheticLowRank(1, 1024, 32, 7);
  if (!f.Put("fc2.w", g).ok()) return kExitSetup;
  std::vector<float> x(plan.bucket_elements());
  std::string hashes;
  client::StepTelemetry t;
  int failures = 0;
  for (int step = 0; step < 2; ++step) {
    FillBucket(plan, me, step, x.data());
    const absl::Status s = (*ar)->Run(x.data(), f, &t);
    if (!s.ok()) return Fail(me, s.ToString());
    absl::StrAppend(&hashes, step == 0 ? "" : ",", HashHex(x.data(), x.size()));
    if (step != 0) continue;
    int64_t nonzero = 0;
    for (int l : {0, 1, 2, 4}) {
      const std::string p = CheckEuclidLayer(plan, l, w, 0, x.data(), &nonzero);
      if (!p.empty()) failures += Fail(me, p);
    }
    if (nonzero == 0) failures += Fail(me, "no quantization error at all");
    const std::string p = CheckGiftLayer(plan, kGiftLayer, g, w, 0, x.data());
    if (!p.empty()) failures += Fail(me, p);
    if (t.layers[kGiftLayer].path != LayerPath::kGift) {
      failures += Fail(me, "fc2.w did not take the GIFT path");
    }
    const double fp32_ring =
        2.0 * (w - 1) / w * 4.0 * double(plan.communicated_elements());
    const double sent = double(t.bytes_euclid + t.bytes_gift);
    if (!(sent <= 0.255 * fp32_ring && sent >= 0.24 * fp32_ring)) {
      failures +=
          Fail(me, absl::StrCat("payload ", sent, " vs ring ", fp32_ring));
    }
  }
  std::error_code ec;
  const std::string netns =
      std::filesystem::read_symlink("/proc/self/ns/net", ec);
  (void)WriteRankReport(
      env, absl::StrCat("hash=", hashes, " addr=", addr, " netns=", netns));
  return failures == 0 ? 0 : kExitCheckFailed;
}

int Main() {
  absl::StatusOr<RankEnv> env = RankEnvFromEnvironment();
  const char* addr = std::getenv("GIFT_NETNS_ADDR");
  if (!env.ok() || addr == nullptr) {
    std::cerr << "needs the harness environment and GIFT_NETNS_ADDR"
              << std::endl;
    return kExitSetup;
  }
  auto store = client::FileStore::Create(env->store_dir);
  if (!store.ok()) return kExitSetup;
  client::TransportOptions options;
  options.rank = env->rank;
  options.world_size = env->world_size;
  options.store = store->get();
  options.hostname = addr;
  options.timeout = absl::Seconds(15);
  auto comm = client::CreateTransport(options);
  if (!comm.ok()) {
    std::cerr << "rank " << env->rank << ": " << comm.status() << std::endl;
    return kExitSetup;
  }
  return Run(**comm, *env, addr);
}

}  // namespace
}  // namespace gift::multiprocess

int main() { return gift::multiprocess::Main(); }
