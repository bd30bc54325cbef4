#include "client/staging_transport.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"

namespace gift::client {
namespace {

// One past the last byte of the ranges [offsets[p], +sizes[p]).
size_t Extent(std::span<const size_t> sizes, std::span<const size_t> offsets) {
  size_t end = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    if (sizes[p] > 0) end = std::max(end, offsets[p] + sizes[p]);
  }
  return end;
}

}  // namespace

StagingTransport::StagingTransport(Transport* inner, void* stream)
    : Transport(inner->rank(), inner->world_size(), inner->timeout()),
      inner_(inner),
      stream_(static_cast<cudaStream_t>(stream)) {}

StagingTransport::~StagingTransport() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

absl::Status StagingTransport::SetStream(void* stream) {
  if (stream == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "the staged communicator takes host memory and has no streams");
}

absl::StatusOr<char*> StagingTransport::Scratch(size_t bytes) {
  if (scratch_ == nullptr || bytes > capacity_) {
    if (scratch_ != nullptr) {
      GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      GIFT_CUDA_RETURN_IF_ERROR(cudaFree(scratch_));
      scratch_ = nullptr;
    }
    capacity_ = std::max<size_t>(bytes, 256);
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMalloc(reinterpret_cast<void**>(&scratch_), capacity_));
  }
  // The wrapped communicator enqueues on our stream, after our copies (its
  // own timeout bounds the call).
  RETURN_IF_ERROR(inner_->SetStream(stream_));
  return scratch_;
}

absl::Status StagingTransport::ToDevice(void* dst, const void* src,
                                        size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status StagingTransport::ToHost(void* dst, const void* src,
                                      size_t bytes) {
  if (bytes > 0) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status StagingTransport::DoAllToAllV(
    const void* send, std::span<const size_t> send_sizes,
    std::span<const size_t> send_offsets, void* recv,
    std::span<const size_t> recv_sizes, std::span<const size_t> recv_offsets,
    uint64_t& /*sent: counted by inner_*/) {
  const size_t in = Extent(send_sizes, send_offsets);
  const size_t out = Extent(recv_sizes, recv_offsets);
  ASSIGN_OR_RETURN(char* d, Scratch(in + out));
  // Whole extents go through, so bytes between the ranges keep their values.
  RETURN_IF_ERROR(ToDevice(d, send, in));
  RETURN_IF_ERROR(ToDevice(d + in, recv, out));
  RETURN_IF_ERROR(inner_->AllToAllV(d, send_sizes, send_offsets, d + in,
                                    recv_sizes, recv_offsets));
  return ToHost(recv, d + in, out);
}

absl::Status StagingTransport::DoAllGatherV(const void* send, size_t send_bytes,
                                            void* recv,
                                            std::span<const size_t> recv_sizes,
                                            uint64_t& /*sent*/) {
  size_t total = 0;
  for (size_t n : recv_sizes) total += n;
  ASSIGN_OR_RETURN(char* d, Scratch(send_bytes + total));
  RETURN_IF_ERROR(ToDevice(d, send, send_bytes));
  RETURN_IF_ERROR(
      inner_->AllGatherV(d, send_bytes, d + send_bytes, recv_sizes));
  return ToHost(recv, d + send_bytes, total);
}

absl::Status StagingTransport::DoAllReduce(const void* send, void* recv,
                                           size_t count, DataType type,
                                           ReduceOp op, uint64_t& /*sent*/) {
  const size_t bytes = count * SizeOf(type);
  ASSIGN_OR_RETURN(char* d, Scratch(bytes));
  RETURN_IF_ERROR(ToDevice(d, send, bytes));
  RETURN_IF_ERROR(inner_->AllReduce(d, d, count, type, op));
  return ToHost(recv, d, bytes);
}

absl::Status StagingTransport::DoBroadcast(void* data, size_t bytes, int root,
                                           uint64_t& /*sent*/) {
  ASSIGN_OR_RETURN(char* d, Scratch(bytes));
  RETURN_IF_ERROR(ToDevice(d, data, bytes));
  RETURN_IF_ERROR(inner_->Broadcast(d, bytes, root));
  return ToHost(data, d, bytes);
}

absl::Status StagingTransport::DoBarrier(uint64_t& /*sent*/) {
  RETURN_IF_ERROR(inner_->SetStream(stream_));
  return inner_->Barrier();
}

}  // namespace gift::client
