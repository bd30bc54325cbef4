// The `nccl-fp8` mode of AllReduceEngine: the paper's Algorithm 1, for
// comparison with the two-phase path (DESIGN §3). Per layer of the plan:
//   amax   = MAX-allreduce over ranks of max|x| (Transport::AllReduce on
//            the per-layer vector; +Inf when a rank holds a NaN/Inf),
//   s      = W · amax / fmax   (W-fold headroom: the FP8 sum of W codes of
//            magnitude ≤ fmax / W cannot overflow; s = 1 for amax = 0),
//   q      = fp8(x / s) in the layer's format (E4M3 or E5M2, satfinite),
//   q_sum  = ncclAllReduce(q, SUM) in ncclFloat8e4m3 / ncclFloat8e5m2,
//   result = float(q_sum) · s / W, or NaN for the whole layer when amax is
//            not finite (FP32 semantics, counted in the telemetry).
// GIFT layers take this Euclidean path too, and 4-bit layers go E4M3 (NCCL
// has no 4-bit sum). NCCL sums FP8 natively only on
// sm_90+ with NCCL 2.24+; anything else is FAILED_PRECONDITION at creation.
//
// The FP8 sums run on a second NCCL communicator of the same ranks, made at
// creation (its unique id travels by Transport::Broadcast), because the
// Transport interface has no FP8 data type. Its bytes are counted here
// with the NCCL backend's ring model (2(W−1)/W of the buffer) and reported
// as StepTelemetry::bytes_euclid; the amax allreduce is counted by the
// communicator. Calls poll for completion against the communicator's
// timeout and abort the FP8 communicator when it runs out.
//
//   ASSIGN_OR_RETURN(auto nf, CreateNcclFp8AllReduce(comm));  // local
//   RETURN_IF_ERROR(nf->Connect());                            // collective
//   RETURN_IF_ERROR(nf->Run(device_bucket, plan, &telemetry));
//
// Thread safety: not thread-safe; the communicator must not be used
// concurrently.
#ifndef GIFT_CLIENT_NCCL_FP8_ALLREDUCE_H_
#define GIFT_CLIENT_NCCL_FP8_ALLREDUCE_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/epoch_plan.h"
#include "client/telemetry.h"
#include "client/transport.h"

namespace gift::client {

class NcclFp8AllReduce {
 public:
  virtual ~NcclFp8AllReduce() = default;
  // Collective: joins the FP8 communicator (unique id from rank 0 by
  // Transport::Broadcast). REQUIRES: called once, before Run.
  virtual absl::Status Connect() = 0;
  // Averages the plan's layers of `bucket` (device memory) in place and
  // fills t's per-layer non-finite flags and byte counts (t->layers holds
  // one entry per plan layer). Collective. Points comm at this object's
  // stream first and returns with the results complete.
  virtual absl::Status Run(float* bucket, const EpochPlan& plan,
                           StepTelemetry* t) = 0;
};

// Local: checks the device and makes the CUDA context (comm's stream is set
// to its own). FAILED_PRECONDITION for another backend, a build without CUDA,
// a device below sm_90 or an NCCL older than 2.24. Defined in
// fp8_backend.cc (the one place with #if on CUDA).
absl::StatusOr<std::unique_ptr<NcclFp8AllReduce>> CreateNcclFp8AllReduce(
    Transport* comm);

}  // namespace gift::client

#endif  // GIFT_CLIENT_NCCL_FP8_ALLREDUCE_H_
