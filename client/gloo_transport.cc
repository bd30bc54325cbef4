#include "client/gloo_transport.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/gloo_store_adapter.h"

namespace gift::client {
namespace {

// Gloo throws; this is the one place its exceptions become a Status. I/O
// errors are DEADLINE_EXCEEDED when something timed out and UNAVAILABLE when a
// connection broke; anything else (failed GLOO_ENFORCE, ...) is INTERNAL.
template <typename F>
absl::Status GlooCall(const char* call, const char* file, int line, F&& f) {
  const auto where = [&](absl::string_view what) {
    return absl::StrCat(file, ":", line, ": ", call, " failed: ", what);
  };
  try {
    f();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    const std::string msg = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(msg, "timeout") ||
        absl::StrContains(msg, "timed out")) {
      return absl::DeadlineExceededError(where(e.what()));
    }
    return absl::UnavailableError(where(e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(where(e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(where(e.what()));
  }
}

// Runs `body` (a braced block that may throw) and returns its Status, naming
// `call` and the caller's file:line.
#define GIFT_GLOO_CALL(call, ...) \
  GlooCall(call, __FILE__, __LINE__, [&] __VA_ARGS__)

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN.
uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

void SumBf16(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    out[i] = FloatToBf16(Bf16ToFloat(x[i]) + Bf16ToFloat(y[i]));
  }
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
gloo::AllreduceOptions::Func ReduceFunc(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return static_cast<ReduceFn>(&gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kSum:
      break;
  }
  return static_cast<ReduceFn>(&gloo::sum<T>);
}

template <typename T>
void RunAllReduce(const std::shared_ptr<gloo::Context>& context,
                  const void* send, void* recv, size_t count,
                  gloo::AllreduceOptions::Func fn, absl::Duration timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setTimeout(Millis(timeout));
  if (send != recv) {
    opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
  }
  opts.setOutput(static_cast<T*>(recv), count);
  opts.setReduceFunction(std::move(fn));
  gloo::allreduce(opts);
}

size_t RoundUp(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Gloo writes to its sockets with writev(2), which raises SIGPIPE when a peer
// has gone away; by default that would kill this process instead of letting
// the communicator report UNAVAILABLE. Ignore it unless the application has
// installed a handler of its own.
void IgnoreSigpipeByDefault() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

GlooTransport::GlooTransport(int rank, int world_size, absl::Duration timeout,
                             std::shared_ptr<gloo::Context> context)
    : Transport(rank, world_size, timeout), context_(std::move(context)) {}

GlooTransport::~GlooTransport() = default;

absl::StatusOr<std::unique_ptr<Transport>> GlooTransport::Create(
    const TransportOptions& options) {
  IgnoreSigpipeByDefault();
  gloo::transport::tcp::attr attr;
  if (options.interface.empty()) {
    attr.hostname = options.hostname;
  } else {
    attr.iface = options.interface;
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(
      options.rank, options.world_size);
  GlooStoreAdapter store(options.store, options.timeout);
  absl::Status status = GIFT_GLOO_CALL("gloo connectFullMesh", {
    std::shared_ptr<gloo::transport::Device> device =
        gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(Millis(options.timeout));
    context->connectFullMesh(store, device);
  });
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("rank ", options.rank, " of ", options.world_size,
                     ": gloo rendezvous (this rank listens on ",
                     options.interface.empty()
                         ? options.hostname
                         : absl::StrCat("interface ", options.interface),
                     "): ", status.message()));
  }
  return std::unique_ptr<Transport>(new GlooTransport(
      options.rank, options.world_size, options.timeout, std::move(context)));
}

absl::Status GlooTransport::SetStream(void* stream) {
  if (stream != nullptr) {
    return absl::InvalidArgumentError(
        "the gloo communicator works on host memory and takes no stream");
  }
  return absl::OkStatus();
}

absl::Status GlooTransport::Checked(absl::Status status) {
  if (!status.ok()) {
    GIFT_GLOO_CALL("closeConnections", {
      context_->closeConnections();
    }).IgnoreError();
    return absl::Status(status.code(),
                        absl::StrCat("rank ", rank(), ": ", status.message()));
  }
  return status;
}

absl::Status GlooTransport::DoAllToAllV(const void* send,
                                        std::span<const size_t> send_sizes,
                                        std::span<const size_t> send_offsets,
                                        void* recv,
                                        std::span<const size_t> recv_sizes,
                                        std::span<const size_t> recv_offsets,
                                        uint64_t& sent) {
  const int w = world_size();
  const int me = rank();
  if (recv_sizes[me] > 0) {
    std::memmove(static_cast<char*>(recv) + recv_offsets[me],
                 static_cast<const char*>(send) + send_offsets[me],
                 recv_sizes[me]);
  }
  size_t send_extent = 0;
  size_t recv_extent = 0;
  for (int p = 0; p < w; ++p) {
    if (p == me) continue;
    if (send_sizes[p] > 0) {
      send_extent = std::max(send_extent, send_offsets[p] + send_sizes[p]);
    }
    if (recv_sizes[p] > 0) {
      recv_extent = std::max(recv_extent, recv_offsets[p] + recv_sizes[p]);
    }
  }
  const absl::Time deadline = absl::Now() + timeout();
  return Checked(GIFT_GLOO_CALL("all-to-all-v send/recv", {
    auto in =
        context_->createUnboundBuffer(const_cast<void*>(send), send_extent);
    auto out = context_->createUnboundBuffer(recv, recv_extent);
    const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
    int sends = 0;
    int recvs = 0;
    // Pairwise order: in step i talk to rank+i and rank-i, so that no rank
    // is the target of everyone at once.
    for (int i = 1; i < w; ++i) {
      const int to = (me + i) % w;
      const int from = (me - i + w) % w;
      if (recv_sizes[from] > 0) {
        out->recv(from, slot, recv_offsets[from], recv_sizes[from]);
        ++recvs;
      }
      if (send_sizes[to] > 0) {
        in->send(to, slot, send_offsets[to], send_sizes[to]);
        ++sends;
        sent += send_sizes[to];
      }
    }
    for (int i = 0; i < recvs; ++i)
      out->waitRecv(Millis(deadline - absl::Now()));
    for (int i = 0; i < sends; ++i)
      in->waitSend(Millis(deadline - absl::Now()));
  }));
}

absl::Status GlooTransport::DoAllGatherV(const void* send, size_t send_bytes,
                                         void* recv,
                                         std::span<const size_t> recv_sizes,
                                         uint64_t& sent) {
  if (world_size() == 1) {
    if (send_bytes > 0) std::memcpy(recv, send, send_bytes);
    return absl::OkStatus();
  }
  sent += RingAllGatherVBytes(recv_sizes, rank());
  return Checked(GIFT_GLOO_CALL("gloo::allgatherv", {
    gloo::AllgathervOptions opts(context_);
    opts.setTimeout(Millis(timeout()));
    opts.setInput(static_cast<char*>(const_cast<void*>(send)), send_bytes);
    opts.setOutput(static_cast<char*>(recv),
                   std::vector<size_t>(recv_sizes.begin(), recv_sizes.end()));
    gloo::allgatherv(opts);
  }));
}

absl::Status GlooTransport::DoAllReduce(const void* send, void* recv,
                                        size_t count, DataType type,
                                        ReduceOp op, uint64_t& sent) {
  const size_t bytes = count * SizeOf(type);
  if (world_size() == 1) {
    if (send != recv) std::memmove(recv, send, bytes);
    return absl::OkStatus();
  }
  sent += RingAllReduceBytes(bytes, SizeOf(type), world_size(), rank());
  const absl::Duration t = timeout();
  return Checked(GIFT_GLOO_CALL("gloo::allreduce", {
    switch (type) {
      case DataType::kFloat32:
        RunAllReduce<float>(context_, send, recv, count, ReduceFunc<float>(op),
                            t);
        break;
      case DataType::kInt64:
        RunAllReduce<int64_t>(context_, send, recv, count,
                              ReduceFunc<int64_t>(op), t);
        break;
      case DataType::kBFloat16:
        RunAllReduce<uint16_t>(context_, send, recv, count, &SumBf16, t);
        break;
    }
  }));
}

absl::Status GlooTransport::DoBroadcast(void* data, size_t bytes, int root,
                                        uint64_t& sent) {
  if (world_size() == 1) return absl::OkStatus();
  sent += TreeBroadcastBytes(bytes, world_size(), rank(), root);
  return Checked(GIFT_GLOO_CALL("gloo::broadcast", {
    gloo::BroadcastOptions opts(context_);
    opts.setTimeout(Millis(timeout()));
    opts.setOutput(static_cast<char*>(data), bytes);
    opts.setRoot(root);
    gloo::broadcast(opts);
  }));
}

absl::Status GlooTransport::DoBarrier(uint64_t& /*sent*/) {
  // Gloo's barrier exchanges empty messages: no payload bytes.
  if (world_size() == 1) return absl::OkStatus();
  return Checked(GIFT_GLOO_CALL("gloo::barrier", {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(Millis(timeout()));
    gloo::barrier(opts);
  }));
}

uint64_t GlooTransport::RingAllReduceBytes(size_t total_bytes,
                                           size_t element_size, int world_size,
                                           int rank) {
  if (world_size < 2 || total_bytes == 0) return 0;
  const size_t w = static_cast<size_t>(world_size);
  const size_t r = static_cast<size_t>(rank);
  const size_t max_segment =
      element_size *
      (gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize / element_size);
  const size_t segment = RoundUp(
      std::min((total_bytes + 2 * w - 1) / (2 * w), max_segment), element_size);
  const size_t segments =
      RoundUp(std::max((total_bytes + segment - 1) / segment, 2 * w), w);
  const size_t per_rank = segments / w;
  // Reduce-scatter sends the segments of W-1 chunks starting after its own;
  // allgather sends those of W-1 chunks starting at its own. Segments past the
  // end of the buffer are short or empty.
  const auto length = [&](size_t index) -> uint64_t {
    const size_t offset = (index % segments) * segment;
    return offset >= total_bytes ? 0 : std::min(segment, total_bytes - offset);
  };
  uint64_t bytes = 0;
  for (size_t i = 0; i < (w - 1) * per_rank; ++i) {
    bytes += length((r + 1) * per_rank + i);
    bytes += length(r * per_rank + i);
  }
  return bytes;
}

uint64_t GlooTransport::RingAllGatherVBytes(std::span<const size_t> sizes,
                                            int rank) {
  // Each rank forwards every piece but the one of its successor, which is
  // where the ring starts.
  uint64_t bytes = 0;
  const size_t w = sizes.size();
  for (size_t p = 0; p < w; ++p) {
    if (p != (static_cast<size_t>(rank) + 1) % w) bytes += sizes[p];
  }
  return w < 2 ? 0 : bytes;
}

uint64_t GlooTransport::TreeBroadcastBytes(size_t bytes, int world_size,
                                           int rank, int root) {
  // Binomial tree on ranks renumbered from the root: in the round of
  // distance d (d = 1, 2, 4, ...), every rank below d sends to rank + d.
  const int v = (rank - root + world_size) % world_size;
  uint64_t total = 0;
  for (int d = 1; d < world_size; d <<= 1) {
    if (v < d && v + d < world_size) total += bytes;
  }
  return total;
}

}  // namespace gift::client
