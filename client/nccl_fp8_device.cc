#include "client/nccl_fp8_device.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/device_ops.h"
#include "common/cuda_check.h"
#include "common/nccl_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"

#if NCCL_VERSION_CODE < 22400
#error "nccl-fp8 needs nccl.h of NCCL 2.24 or later (ncclFloat8e4m3)"
#endif

namespace gift::client {
namespace {

using ::gift::internal::NcclError;

constexpr int kMinNcclVersion = 22400;  // first NCCL with FP8 reductions
constexpr absl::Duration kPoll = absl::Microseconds(50);

// The FP8 format of a layer on this path: 4-bit layers go E4M3 (NCCL has
// no 4-bit sum).
kernels::Fp8Format Fp8Of(const BucketLayer& l) {
  return l.format.is_fp4() ? kernels::Fp8Format::kE4M3 : l.format.fp8();
}

ncclDataType_t NcclFp8Type(kernels::Fp8Format f) {
  return f == kernels::Fp8Format::kE4M3 ? ncclFloat8e4m3 : ncclFloat8e5m2;
}

// Device support: sm_90+ and a runtime NCCL with FP8 reductions.
absl::Status CheckSupport(int device) {
  int major = 0, minor = 0;
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &major, cudaDevAttrComputeCapabilityMajor, device));
  GIFT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major < 9) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl-fp8: NCCL sums FP8 natively only on sm_90 or newer; CUDA device ",
        device, " is sm_", major, minor));
  }
  int version = 0;
  GIFT_NCCL_RETURN_IF_ERROR(ncclGetVersion(&version));
  if (version < kMinNcclVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl-fp8: the loaded NCCL (", version,
                     ") has no FP8 reductions; 2.24 or later is needed"));
  }
  return absl::OkStatus();
}

class NcclFp8Device : public NcclFp8AllReduce {
 public:
  NcclFp8Device(Transport* comm, std::unique_ptr<gpu::Context> ctx)
      : comm_(comm),
        ctx_(std::move(ctx)),
        stream_(static_cast<cudaStream_t>(ctx_->stream())) {}

  ~NcclFp8Device() override {
    (void)ctx_->Synchronize();
    (void)comm_->SetStream(nullptr);  // leave no dangling stream behind
    if (nccl_ != nullptr) ncclCommAbort(nccl_);  // no flush needed: all waited
    if (amax_ != nullptr) cudaFree(amax_);
    if (codes_ != nullptr) cudaFree(codes_);
  }

  absl::Status Connect() override {
    if (nccl_ != nullptr || connected_) {
      return absl::FailedPreconditionError("nccl-fp8: Connect called twice");
    }
    connected_ = true;
    const absl::Time deadline = absl::Now() + comm_->timeout();
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (comm_->rank() == 0) GIFT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    void* d_id = nullptr;
    GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_id, sizeof(id)));
    // Copies on the communicator's stream, ordered with the broadcast.
    absl::Status s = [&]() -> absl::Status {
      RETURN_IF_ERROR(comm_->SetStream(stream_));
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          d_id, &id, sizeof(id), cudaMemcpyHostToDevice, stream_));
      RETURN_IF_ERROR(comm_->Broadcast(d_id, sizeof(id), 0));
      GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          &id, d_id, sizeof(id), cudaMemcpyDeviceToHost, stream_));
      return ctx_->Synchronize();
    }();
    cudaFree(d_id);
    RETURN_IF_ERROR(s);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    GIFT_NCCL_RETURN_IF_ERROR(ncclCommInitRankConfig(
        &nccl_, comm_->world_size(), id, comm_->rank(), &config));
    return Wait("ncclCommInitRankConfig (nccl-fp8)", deadline, false);
  }

  absl::Status Run(float* bucket, const EpochPlan& plan,
                   StepTelemetry* t) override {
    if (nccl_ == nullptr) {
      return absl::FailedPreconditionError(
          connected_ ? "nccl-fp8: the FP8 communicator was aborted by an "
                       "earlier failure"
                     : "nccl-fp8: Run before Connect");
    }
    RETURN_IF_ERROR(comm_->SetStream(stream_));
    const std::vector<BucketLayer>& layers = plan.layers();
    const int num = static_cast<int>(layers.size());
    const float w = static_cast<float>(comm_->world_size());
    RETURN_IF_ERROR(Reserve(num, plan.bucket_elements()));
    const uint64_t before = comm_->bytes_sent().Total();
    if (num > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(amax_, 0, num * sizeof(float), stream_));
    }
    for (int i = 0; i < num; ++i) {
      RETURN_IF_ERROR(device::AbsMax(*ctx_, bucket + layers[i].offset,
                                     layers[i].size(), amax_ + i));
    }
    if (num > 0) {
      RETURN_IF_ERROR(comm_->AllReduce(amax_, amax_, num, DataType::kFloat32,
                                       ReduceOp::kMax));
    }
    for (int i = 0; i < num; ++i) {
      const BucketLayer& l = layers[i];
      RETURN_IF_ERROR(device::EncodeScaled(*ctx_, bucket + l.offset, l.size(),
                                           Fp8Of(l), amax_ + i, w,
                                           codes_ + l.offset));
    }
    RETURN_IF_ERROR(SumCodes(layers, t));
    for (int i = 0; i < num; ++i) {
      const BucketLayer& l = layers[i];
      RETURN_IF_ERROR(device::DecodeScaled(*ctx_, codes_ + l.offset, l.size(),
                                           Fp8Of(l), amax_ + i, w,
                                           bucket + l.offset));
    }
    std::vector<float> amax(num);
    if (num > 0) {
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(amax.data(), amax_, num * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_));
    }
    RETURN_IF_ERROR(ctx_->Synchronize());
    for (int i = 0; i < num; ++i) {
      t->layers[i].nonfinite_result = !std::isfinite(amax[i]);
      t->nonfinite_layers += t->layers[i].nonfinite_result;
    }
    t->bytes_euclid += comm_->bytes_sent().Total() - before;
    return absl::OkStatus();
  }

 private:
  // One grouped FP8 SUM per non-empty layer, in place.
  absl::Status SumCodes(const std::vector<BucketLayer>& layers,
                        StepTelemetry* t) {
    const absl::Time deadline = absl::Now() + comm_->timeout();
    const uint64_t ranks = static_cast<uint64_t>(comm_->world_size());
    uint64_t sent = 0;
    GIFT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    absl::Status enqueue;
    for (const BucketLayer& l : layers) {
      if (l.size() == 0) continue;
      const ncclResult_t r =
          ncclAllReduce(codes_ + l.offset, codes_ + l.offset, l.size(),
                        NcclFp8Type(Fp8Of(l)), ncclSum, nccl_, stream_);
      if (r != ncclSuccess && r != ncclInProgress) {
        enqueue = NcclError(r, "ncclAllReduce (fp8)", __FILE__, __LINE__);
        break;
      }
      sent += 2 * (ranks - 1) * static_cast<uint64_t>(l.size()) / ranks;
    }
    // A started group is always ended, even after a failed enqueue.
    const ncclResult_t end = ncclGroupEnd();
    if (!enqueue.ok()) return Abort(enqueue);
    if (end != ncclSuccess && end != ncclInProgress) {
      return Abort(NcclError(end, "ncclGroupEnd", __FILE__, __LINE__));
    }
    RETURN_IF_ERROR(Wait("nccl-fp8 allreduce", deadline, true));
    t->bytes_euclid += sent;
    return absl::OkStatus();
  }

  absl::Status Reserve(int layers, int64_t elements) {
    if (layers > amax_floats_) {
      if (amax_ != nullptr) GIFT_CUDA_RETURN_IF_ERROR(cudaFree(amax_));
      amax_ = nullptr;
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMalloc(reinterpret_cast<void**>(&amax_), layers * sizeof(float)));
      amax_floats_ = layers;
    }
    if (elements > code_bytes_) {
      if (codes_ != nullptr) GIFT_CUDA_RETURN_IF_ERROR(cudaFree(codes_));
      codes_ = nullptr;
      GIFT_CUDA_RETURN_IF_ERROR(
          cudaMalloc(reinterpret_cast<void**>(&codes_), elements));
      code_bytes_ = elements;
    }
    return absl::OkStatus();
  }

  // Polls NCCL's asynchronous state (and, when `stream`, the stream) until
  // done; aborts the FP8 communicator on an error or at the deadline.
  absl::Status Wait(absl::string_view what, absl::Time deadline, bool stream) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(nccl_, &state);
      if (r != ncclSuccess) {
        return Abort(NcclError(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        return Abort(
            NcclError(state, std::string(what).c_str(), __FILE__, __LINE__));
      }
      const cudaError_t q = stream ? cudaStreamQuery(stream_) : cudaSuccess;
      if (q == cudaSuccess && state == ncclSuccess) return absl::OkStatus();
      if (q != cudaSuccess && q != cudaErrorNotReady) {
        return Abort(
            internal::CudaError(q, "cudaStreamQuery", __FILE__, __LINE__));
      }
      if (absl::Now() >= deadline) {
        return Abort(absl::DeadlineExceededError(
            absl::StrCat(what, ": not complete after ",
                         absl::FormatDuration(comm_->timeout()),
                         "; a peer is dead or stalled")));
      }
      absl::SleepFor(kPoll);
    }
  }

  absl::Status Abort(absl::Status why) {
    if (nccl_ != nullptr) {
      ncclCommAbort(nccl_);
      nccl_ = nullptr;
    }
    return absl::Status(
        why.code(), absl::StrCat("rank ", comm_->rank(), ": ", why.message()));
  }

  Transport* const comm_;
  std::unique_ptr<gpu::Context> ctx_;
  cudaStream_t stream_;
  ncclComm_t nccl_ = nullptr;
  bool connected_ = false;
  float* amax_ = nullptr;
  int amax_floats_ = 0;
  uint8_t* codes_ = nullptr;
  int64_t code_bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclFp8AllReduce>> CreateNcclFp8Device(
    Transport* comm) {
  int device = 0;
  GIFT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  RETURN_IF_ERROR(CheckSupport(device));
  ASSIGN_OR_RETURN(std::unique_ptr<gpu::Context> ctx,
                   gpu::Context::Create(device));
  RETURN_IF_ERROR(comm->SetStream(ctx->stream()));
  return std::unique_ptr<NcclFp8AllReduce>(
      new NcclFp8Device(comm, std::move(ctx)));
}

}  // namespace gift::client
