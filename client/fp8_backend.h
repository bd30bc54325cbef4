// The memory-specific primitives under the quantized allreduce: one
// interface with a host implementation (Gloo, host memory, kernels/*.cc) and
// a device implementation (NCCL, device memory, the kernels' cuda:: variants
// on the communicator's stream), chosen by the communicator's memory_kind()
// in CreateFp8Backend. Fp8Round and QuantizedAllReduce are written once
// against it, so both paths share the chunking, the wire format, the step
// structure, the residual semantics and the agreement; only these vector
// operations differ.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Fp8Backend> b, CreateFp8Backend(comm));
//   std::unique_ptr<Fp8Buffer> buf = b->NewBuffer();
//   RETURN_IF_ERROR(buf->Resize(n * sizeof(float)));
//   RETURN_IF_ERROR(b->Divide(buf->floats(), n, 4.0f));
//
// Pointers passed to a backend are of its memory kind. The device backend
// queues everything on one stream, the communicator's (it sets it with
// SetStream), so kernels and collectives are ordered without extra
// synchronisation; EndRound, the flag and statistics read-back, is its only
// host wait besides the communicator's own.
//
// Bit-identity: Quantize, Dequantize, Accumulate, AddInPlace, Divide, ToBf16
// and FromBf16 give the same bits on both backends (IEEE single operations,
// no contraction); the GIFT transforms agree to GEMM rounding only.
//
// Thread safety: not thread-safe; one user at a time.
#ifndef GIFT_CLIENT_FP8_BACKEND_H_
#define GIFT_CLIENT_FP8_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/bucket_plan.h"
#include "client/communicator.h"
#include "client/probe.h"
#include "client/versioned_factors.h"
#include "kernels/accumulate.h"
#include "kernels/quantize.h"

namespace gift::client {

// A resizable buffer in the backend's memory.
class Fp8Buffer {
 public:
  virtual ~Fp8Buffer() = default;
  // Makes the buffer `bytes` long. A changed size leaves the contents
  // unspecified; an unchanged size keeps them.
  virtual absl::Status Resize(size_t bytes) = 0;
  // Sets every byte to zero.
  virtual absl::Status Zero() = 0;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;

  float* floats() { return static_cast<float*>(data()); }
  uint8_t* u8() { return static_cast<uint8_t*>(data()); }
};

class Fp8Backend {
 public:
  virtual ~Fp8Backend() = default;

  virtual MemoryKind memory_kind() const = 0;
  virtual std::unique_ptr<Fp8Buffer> NewBuffer() = 0;

  // Brackets every step. BeginStep points the communicator at the backend's
  // stream again (several allreduces may share one communicator, each with
  // its own backend); EndStep returns once all queued work is complete.
  virtual absl::Status BeginStep() = 0;
  virtual absl::Status EndStep() = 0;
  // The stream the backend's work is queued on (cudaStream_t), or nullptr
  // on the host.
  virtual void* stream() const { return nullptr; }

  // The communicator for the small control messages built in host memory
  // (plan and option checks, the version agreement): the communicator itself
  // on the host, a staging wrapper over it on the device
  // (staging_communicator.h). Owned by the backend.
  virtual Communicator* control() = 0;

  // ---- one round of the two-phase algorithm (fp8_round.h) ----
  // Clears `stat_slots` quantize statistics and `flags` per-layer non-finite
  // flags for the round.
  virtual absl::Status BeginRound(int stat_slots, int flags) = 0;
  // kernels::Quantize; the statistics go to `stat_slot` (-1: none).
  virtual absl::Status Quantize(const float* x, int64_t n,
                                const kernels::QuantizeSpec& spec,
                                uint8_t* codes, float* scales, float* residual,
                                int stat_slot) = 0;
  virtual absl::Status Dequantize(const uint8_t* codes, const float* scales,
                                  int64_t n, const kernels::QuantizeSpec& spec,
                                  float* out) = 0;
  // kernels::DequantizeAccumulate with zero_first; `sources` is a host array
  // of pointers of the backend's kind.
  virtual absl::Status Accumulate(const kernels::Fp8Source* sources,
                                  int num_sources, int64_t n,
                                  const kernels::QuantizeSpec& spec,
                                  float* acc) = 0;
  // acc[i] = acc[i] + x[i].
  virtual absl::Status AddInPlace(float* acc, const float* x, int64_t n) = 0;
  // x[i] = x[i] / w.
  virtual absl::Status Divide(float* x, int64_t n, float w) = 0;
  // Sets flag `flag` when any of x[0, n) is NaN or infinite.
  virtual absl::Status FlagNonFinite(const float* x, int64_t n, int flag) = 0;
  // Waits for the round and returns its statistics and flags.
  virtual absl::Status EndRound(std::vector<kernels::QuantizeStats>* stats,
                                std::vector<uint8_t>* flags) = 0;

  // ---- elementwise helpers of the plain modes ----
  virtual absl::Status Zero(void* p, size_t bytes) = 0;
  // x[i] = quiet NaN (0x7FC00000).
  virtual absl::Status FillNaN(float* x, int64_t n) = 0;
  // Round to nearest even bfloat16; NaN stays NaN.
  virtual absl::Status ToBf16(const float* x, int64_t n, uint16_t* out) = 0;
  virtual absl::Status FromBf16(const uint16_t* x, int64_t n, float* out) = 0;

  // ---- GIFT layers (gift_transform.h semantics) ----
  virtual absl::Status Forward(const GiftFactor& f, const float* x,
                               int64_t rows, const float* add, float* out) = 0;
  virtual absl::Status Inverse(const GiftFactor& f, const float* x,
                               int64_t rows, float* out) = 0;
  virtual absl::Status Reproject(const GiftFactor& old_f,
                                 const GiftFactor& new_f, float* residual,
                                 int64_t rows) = 0;
  // probe.h's ProbeLayer on a gradient of the backend's memory kind.
  virtual absl::Status Probe(const float* grad, const LayerSpec& layer,
                             const GiftFactor& factor, ProbeResult* result) = 0;

  // ---- audit steps (quantized_allreduce.h) ----
  // Clears `slots` comparison slots.
  virtual absl::Status BeginCompare(int slots) = 0;
  // Adds to slot `slot` (doubles): err_sq += Σ(x − ref)², x_sq += Σref²,
  // xhat_x += Σx·ref, so that the slot's QuantizeStats::RelL2() and
  // Cosine() are those of x against the reference ref.
  virtual absl::Status Compare(const float* ref, const float* x, int64_t n,
                               int slot) = 0;
  // Waits for the comparisons and returns every slot's sums (n, upper,
  // lower, nonfinite are 0).
  virtual absl::Status EndCompare(
      std::vector<kernels::QuantizeStats>* sums) = 0;
};

// The backend for comm->memory_kind(): host, or (CUDA builds) device on the
// current CUDA device, which sets comm's stream to its own. REQUIRES: comm
// not null and outlives the backend.
absl::StatusOr<std::unique_ptr<Fp8Backend>> CreateFp8Backend(
    Communicator* comm);

}  // namespace gift::client

#endif  // GIFT_CLIENT_FP8_BACKEND_H_
