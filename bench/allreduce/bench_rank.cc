#include "bench/allreduce/bench_rank.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/allreduce/bench_plan.h"
#include "bench/allreduce/bench_results.h"
#include "client/allreduce_engine.h"
#include "client/store.h"
#include "client/transport_factory.h"
#include "common/status_macros.h"

namespace gift::bench {
namespace {

using client::DataType;
using client::ReduceOp;
using client::Transport;

constexpr char kGlooFp32[] = "gloo-fp32";

// One step of a mode: Gloo's allreduce or a AllReduceEngine::Run.
class Stepper {
 public:
  static absl::StatusOr<Stepper> Create(Transport& comm, const BenchBucket& b,
                                        const std::string& mode) {
    Stepper s(comm, b);
    if (mode == kGlooFp32) return s;
    // fp8+drift: the audits' running sums only (no audit step in a run);
    // fp8+audit: every step an audit step. Plain modes audit nothing.
    const bool drift = mode == "fp8+drift", audit = mode == "fp8+audit";
    ASSIGN_OR_RETURN(client::AllReduceMode m,
                     client::ParseAllReduceMode(drift || audit ? "fp8" : mode));
    client::AllReduceEngineOptions o;
    o.mode = m;
    o.probe_interval = 0;
    o.audit_interval = audit ? 1 : drift ? 1000000 : 0;
    ASSIGN_OR_RETURN(s.ar_, client::AllReduceEngine::Create(&comm, b.plan, o));
    return s;
  }

  absl::Status Step(float* bucket) {
    if (ar_ == nullptr) {
      return comm_->AllReduce(bucket, bucket, b_->plan.bucket_elements(),
                              DataType::kFloat32, ReduceOp::kSum);
    }
    return ar_->Run(bucket, b_->factors, nullptr);
  }

 private:
  Stepper(Transport& comm, const BenchBucket& b) : comm_(&comm), b_(&b) {}

  Transport* comm_;
  const BenchBucket* b_;
  std::unique_ptr<client::AllReduceEngine> ar_;
};

double RelL2(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : -1;
}

struct SizeState {
  BenchBucket bucket;
  std::vector<float> input, work, reference;
};

// Runs one mode on one bucket size; fills `row` on every rank.
absl::Status RunMode(Transport& comm, const RankConfig& c, SizeState& st,
                     const std::string& mode, int steps, ModeResult* row) {
  ASSIGN_OR_RETURN(Stepper stepper, Stepper::Create(comm, st.bucket, mode));
  const size_t n = st.input.size();
  std::vector<int64_t> ns(steps, 0);
  int64_t bytes = 0;
  for (int s = -c.warmup; s < steps; ++s) {
    std::memcpy(st.work.data(), st.input.data(), n * sizeof(float));
    RETURN_IF_ERROR(comm.Barrier());
    const uint64_t b0 = comm.bytes_sent().Total();
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(stepper.Step(st.work.data()));
    const absl::Duration dt = absl::Now() - t0;
    if (s < 0) continue;
    ns[s] = absl::ToInt64Nanoseconds(dt);
    bytes += static_cast<int64_t>(comm.bytes_sent().Total() - b0);
  }
  RETURN_IF_ERROR(comm.AllReduce(ns.data(), ns.data(), ns.size(),
                                 DataType::kInt64, ReduceOp::kMax));
  RETURN_IF_ERROR(
      comm.AllReduce(&bytes, &bytes, 1, DataType::kInt64, ReduceOp::kSum));
  std::vector<double> ms;
  for (int64_t v : ns) ms.push_back(double(v) * 1e-6);
  row->mode = mode;
  row->steps = steps;
  row->bytes_per_rank = double(bytes) / (double(c.world_size) * steps);
  row->median_ms = Median(ms);
  row->p90_ms = P90(ms);
  if (mode == "fp32") st.reference = st.work;
  if (mode != kGlooFp32 && !st.reference.empty() && c.rank == 0) {
    row->rel_l2_vs_fp32 = RelL2(st.work, st.reference);
  }
  return absl::OkStatus();
}

// The modes in run order: fp32 first (the relL2 reference).
std::vector<std::string> RunOrder(std::vector<std::string> modes) {
  std::stable_partition(modes.begin(), modes.end(),
                        [](const std::string& m) { return m == "fp32"; });
  return modes;
}

absl::Status RunSize(Transport& comm, const RankConfig& c, int64_t mib,
                     std::vector<ModeResult>* rows) {
  ASSIGN_OR_RETURN(BenchBucket b, MakeBenchBucket(mib << 18));
  SizeState st{
      .bucket = std::move(b), .input = {}, .work = {}, .reference = {}};
  const int64_t n = st.bucket.plan.bucket_elements();
  st.input.resize(n);
  st.work.resize(n);
  FillGradients(st.bucket.plan, c.rank, st.input.data());
  if (c.rank == 0) {
    std::cout << "allreduce_bench: " << mib
              << " MiB bucket: d = " << st.bucket.hidden << ", "
              << st.bucket.plan.layers().size() << " layers (" << kGiftBlocks
              << " GIFT fc2, rank " << kGiftRank << ")" << std::endl;
  }
  const int steps = c.steps > 0 ? c.steps : DefaultSteps(mib);
  for (const std::string& mode : RunOrder(c.modes)) {
    ModeResult row;
    row.size_mib = mib;
    RETURN_IF_ERROR(RunMode(comm, c, st, mode, steps, &row));
    if (c.rank == 0) {
      std::cout << "allreduce_bench: " << mib << " MiB " << mode << ": median "
                << row.median_ms << " ms" << std::endl;
    }
    rows->push_back(row);
  }
  return absl::OkStatus();
}

}  // namespace

int DefaultSteps(int64_t size_mib) {
  return static_cast<int>(
      std::clamp<int64_t>(512 / std::max<int64_t>(size_mib, 1), 3, 20));
}

absl::Status RunBenchRank(const RankConfig& c) {
  ASSIGN_OR_RETURN(std::unique_ptr<client::FileStore> files,
                   client::FileStore::Create(c.store_dir));
  client::PrefixStore store("allreduce_bench/", files.get());
  client::TransportOptions o;
  o.rank = c.rank;
  o.world_size = c.world_size;
  o.store = &store;
  o.timeout = c.timeout;
  o.hostname = c.host;
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> comm, client::CreateTransport(o));
  std::vector<ModeResult> rows;
  for (int64_t mib : c.sizes_mib)
    RETURN_IF_ERROR(RunSize(*comm, c, mib, &rows));
  if (c.rank != 0) return absl::OkStatus();
  std::ofstream f(c.result_path);
  for (const ModeResult& r : rows) f << ToLine(r) << "\n";
  f.close();
  if (!f) return absl::InternalError("cannot write " + c.result_path);
  return absl::OkStatus();
}

}  // namespace gift::bench
