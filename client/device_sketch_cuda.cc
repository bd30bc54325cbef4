// DeviceSketcher with CUDA: accumulators in device memory, the kernels'
// cuBLAS sketch on a private non-blocking stream, copies into the shared
// regions at a window's end (device_sketch.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/device_sketch.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/gpu.h"
#include "kernels/sketch.h"

namespace gift::client {
namespace {

// cuBLAS gets its own workspace so that it never allocates one while a
// stream it runs on is being captured; the sketch GEMMs are small (k <= a
// few dozen columns) and need little.
constexpr size_t kCublasWorkspaceBytes = size_t{4} << 20;

// Makes the sketcher's device current for one call and restores the
// caller's, so that the training thread's CUDA state is left as it was.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) {
      status_ = cudaSetDevice(device);
      changed_ = status_ == cudaSuccess && prev_ >= 0;
    }
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int prev_ = -1;
  bool changed_ = false;
  cudaError_t status_ = cudaSuccess;
};

// Device memory that only grows; what it replaces goes to `retired` (freed
// by the sketcher's destructor, see device_sketch.h).
class GrowBuffer {
 public:
  absl::Status Reserve(size_t bytes, std::vector<void*>* retired) {
    if (bytes <= bytes_) return absl::OkStatus();
    void* p = nullptr;
    GIFT_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    if (ptr_ != nullptr) retired->push_back(ptr_);
    ptr_ = p;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The device scalars of one layer, side by side in one allocation.
struct Scalars {
  double trace;
  int64_t count;
  double a_trace;
  int64_t a_count;
};

struct LayerBuffers {
  int64_t d = 0, k = 0;
  bool opened = false, full = false;
  GrowBuffer omega, y, a, scalars;
};

class CudaDeviceSketcher final : public DeviceSketcher {
 public:
  CudaDeviceSketcher(int device, int layers)
      : device_(device), layers_(layers) {}
  ~CudaDeviceSketcher() override;

  absl::Status Init();

  void* stream() const override { return ctx_->stream(); }
  absl::Status Open(int layer, int64_t d, const std::vector<float>& omega,
                    bool full, int64_t max_rows) override;
  absl::Status Add(int layer, const float* rows, int64_t n, int64_t stride,
                   void* producer) override;
  absl::Status Close(int layer, shm::Region* data,
                     const shm::LayerRegionLayout::Sketch& sketch,
                     shm::Region* full,
                     const shm::FullRegionLayout::Acc* acc) override;
  absl::Status Quiesce() override;

 private:
  cudaStream_t s() const { return static_cast<cudaStream_t>(ctx_->stream()); }
  absl::Status CheckLayer(int layer) const;
  absl::Status AddChunk(LayerBuffers& l, const float* rows, int64_t m,
                        int64_t stride);
  // Queues a copy of `bytes` from device `src` to `offset` in `region`.
  absl::Status CopyOut(shm::Region* region, uint64_t offset, const void* src,
                       size_t bytes);

  const int device_;
  std::unique_ptr<gpu::Context> ctx_;
  void* blas_workspace_ = nullptr;
  cudaEvent_t produced_ = nullptr;  // recorded on the producer stream
  cudaEvent_t sketched_ = nullptr;  // joins a capture back (Add)
  cudaEvent_t closed_ = nullptr;    // after the copies of the last Close
  GrowBuffer gather_, work_;        // shared by every layer (one stream)
  std::vector<LayerBuffers> layers_;
  std::vector<void*> retired_;
};

absl::Status CudaDeviceSketcher::Init() {
  ASSIGN_OR_RETURN(ctx_, gpu::Context::Create(device_));
  DeviceScope scope(device_);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&blas_workspace_, kCublasWorkspaceBytes));
  GIFT_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(static_cast<cublasHandle_t>(ctx_->cublas()),
                         blas_workspace_, kCublasWorkspaceBytes));
  for (cudaEvent_t* e : {&produced_, &sketched_, &closed_}) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  return absl::OkStatus();
}

CudaDeviceSketcher::~CudaDeviceSketcher() {
  DeviceScope scope(device_);
  if (ctx_ != nullptr) cudaStreamSynchronize(s());
  for (cudaEvent_t e : {produced_, sketched_, closed_}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (LayerBuffers& l : layers_) {
    for (GrowBuffer* b : {&l.omega, &l.y, &l.a, &l.scalars}) {
      if (b->bytes() > 0) cudaFree(b->as<void>());
    }
  }
  for (GrowBuffer* b : {&gather_, &work_}) {
    if (b->bytes() > 0) cudaFree(b->as<void>());
  }
  for (void* p : retired_) cudaFree(p);
  ctx_.reset();  // the handles before their workspace
  if (blas_workspace_ != nullptr) cudaFree(blas_workspace_);
}

absl::Status CudaDeviceSketcher::CheckLayer(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device sketch: no layer ", layer, " (of ", layers_.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::Open(int layer, int64_t d,
                                      const std::vector<float>& omega,
                                      bool full, int64_t max_rows) {
  RETURN_IF_ERROR(CheckLayer(layer));
  const int64_t k = d > 0 ? static_cast<int64_t>(omega.size()) / d : 0;
  if (d <= 0 || k <= 0 || k * d != static_cast<int64_t>(omega.size()) ||
      max_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device sketch: Ω of ", omega.size(), " floats for d ", d,
                     ", max_rows ", max_rows));
  }
  DeviceScope scope(device_);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  LayerBuffers& l = layers_[layer];
  const size_t f = sizeof(float);
  RETURN_IF_ERROR(l.omega.Reserve(d * k * f, &retired_));
  RETURN_IF_ERROR(l.y.Reserve(d * k * f, &retired_));
  RETURN_IF_ERROR(l.scalars.Reserve(sizeof(Scalars), &retired_));
  if (full) RETURN_IF_ERROR(l.a.Reserve(d * d * f, &retired_));
  RETURN_IF_ERROR(gather_.Reserve(max_rows * d * f, &retired_));
  RETURN_IF_ERROR(work_.Reserve(kernels::SketchWorkspaceFloats(max_rows, k) * f,
                                &retired_));
  l.d = d;
  l.k = k;
  l.full = full;
  // Ω from pageable memory: the driver stages it before the call returns
  // (possibly waiting for the sketch stream to get there: at a window open,
  // on the thread that runs AfterStep), so `omega` may change afterwards.
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(l.omega.as<void>(), omega.data(),
                                            d * k * f, cudaMemcpyHostToDevice,
                                            s()));
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(l.y.as<void>(), 0, d * k * f, s()));
  GIFT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(l.scalars.as<void>(), 0, sizeof(Scalars), s()));
  if (full) {
    GIFT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(l.a.as<void>(), 0, d * d * f, s()));
  }
  l.opened = true;
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::AddChunk(LayerBuffers& l, const float* rows,
                                          int64_t m, int64_t stride) {
  const float* a = rows;
  if (stride > 1) {  // gather the sampled rows: the kernels take them dense
    const size_t row = l.d * sizeof(float);
    GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(gather_.as<void>(), row, rows,
                                                stride * row, row, m,
                                                cudaMemcpyDeviceToDevice, s()));
    a = gather_.as<float>();
  }
  Scalars* sc = l.scalars.as<Scalars>();
  RETURN_IF_ERROR(kernels::cuda::SketchAccumulate(
      *ctx_, a, m, l.d, l.omega.as<float>(), l.k,
      {l.y.as<float>(), &sc->trace, &sc->count}, work_.as<float>()));
  if (l.full) {
    RETURN_IF_ERROR(kernels::cuda::SecondMomentAccumulate(
        *ctx_, a, m, l.d, {l.a.as<float>(), &sc->a_trace, &sc->a_count}));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::Add(int layer, const float* rows, int64_t n,
                                     int64_t stride, void* producer) {
  RETURN_IF_ERROR(CheckLayer(layer));
  LayerBuffers& l = layers_[layer];
  if (!l.opened) {
    return absl::InvalidArgumentError(
        absl::StrCat("device sketch: layer ", layer, " has no window"));
  }
  if (n < 0 || stride < 1 || (n > 0 && rows == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device sketch: ", n, " rows with stride ", stride));
  }
  if (n == 0) return absl::OkStatus();
  DeviceScope scope(device_);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  cudaStream_t p = static_cast<cudaStream_t>(producer);
  // The legacy default stream (nullptr) is never captured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (p != nullptr)
    GIFT_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(p, &capture));
  if (capture == cudaStreamCaptureStatusNone) {
    // A host pointer would fault the sketch stream later; say so now. (Not
    // while capturing: only stream work belongs inside a capture.)
    cudaPointerAttributes attr{};
    GIFT_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attr, rows));
    if ((attr.type != cudaMemoryTypeDevice &&
         attr.type != cudaMemoryTypeManaged) ||
        (attr.type == cudaMemoryTypeDevice && attr.device != device_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device sketch: activations are not memory of CUDA device ",
          device_));
    }
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(produced_, p));
  GIFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s(), produced_, 0));
  const int64_t chunk = std::min<int64_t>(
      static_cast<int64_t>(gather_.bytes() / (l.d * sizeof(float))),
      static_cast<int64_t>(work_.bytes() / (l.k * sizeof(float))));
  for (int64_t first = 0; first < n; first += chunk) {
    RETURN_IF_ERROR(AddChunk(l, rows + first * stride * l.d,
                             std::min(chunk, n - first), stride));
  }
  if (capture == cudaStreamCaptureStatusActive) {
    // A capture ends only once every stream it forked into joined back.
    GIFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(sketched_, s()));
    GIFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(p, sketched_, 0));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::CopyOut(shm::Region* region, uint64_t offset,
                                         const void* src, size_t bytes) {
  if (offset > region->bytes() || bytes > region->bytes() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("device sketch: ", bytes, " bytes at ", offset,
                     " past the end of a region of ", region->bytes()));
  }
  void* dst = static_cast<char*>(region->data()) + offset;
  GIFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      dst, src, bytes,
      region->on_device() ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost,
      s()));
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::Close(
    int layer, shm::Region* data, const shm::LayerRegionLayout::Sketch& sketch,
    shm::Region* full, const shm::FullRegionLayout::Acc* acc) {
  RETURN_IF_ERROR(CheckLayer(layer));
  LayerBuffers& l = layers_[layer];
  if (!l.opened || data == nullptr || (full != nullptr) != (acc != nullptr) ||
      (full != nullptr && !l.full)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device sketch: bad close of layer ", layer));
  }
  DeviceScope scope(device_);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  const Scalars* sc = l.scalars.as<Scalars>();
  RETURN_IF_ERROR(
      CopyOut(data, sketch.y, l.y.as<void>(), l.d * l.k * sizeof(float)));
  RETURN_IF_ERROR(CopyOut(data, sketch.trace, &sc->trace, sizeof(double)));
  RETURN_IF_ERROR(CopyOut(data, sketch.count, &sc->count, sizeof(int64_t)));
  if (full != nullptr) {
    RETURN_IF_ERROR(
        CopyOut(full, acc->a, l.a.as<void>(), l.d * l.d * sizeof(float)));
    RETURN_IF_ERROR(CopyOut(full, acc->trace, &sc->a_trace, sizeof(double)));
    RETURN_IF_ERROR(CopyOut(full, acc->count, &sc->a_count, sizeof(int64_t)));
  }
  GIFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(closed_, s()));
  bool host = false;
  for (shm::Region* r : {data, full}) {
    if (r == nullptr) continue;
    if (r->on_device()) {
      RETURN_IF_ERROR(r->SignalWrites(s()));  // giftd's Read waits for it
    } else {
      host = true;
    }
  }
  // A host region is read by giftd as soon as the window is marked closed:
  // the copies must be done by then. The one wait of the device path, at a
  // window's end, on the thread that runs AfterStep.
  if (host) GIFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s()));
  l.opened = false;
  return absl::OkStatus();
}

absl::Status CudaDeviceSketcher::Quiesce() {
  DeviceScope scope(device_);
  GIFT_CUDA_RETURN_IF_ERROR(scope.status());
  GIFT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(closed_));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceSketcher>> DeviceSketcher::Create(
    int device, int layers) {
  if (layers < 0) {
    return absl::InvalidArgumentError("device sketch: negative layer count");
  }
  if (device < 0 || device >= gpu::DeviceCount()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device activations need CUDA device ", device, "; ",
                     gpu::DeviceCount(), " visible"));
  }
  auto s = std::make_unique<CudaDeviceSketcher>(device, layers);
  RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<DeviceSketcher>(std::move(s));
}

}  // namespace gift::client
