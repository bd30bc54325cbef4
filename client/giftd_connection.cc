// GiftdConnection: options, registration, mapping and heartbeats (the
// private thread). The per-step work is in attachment_step.cc.
#include "client/giftd_connection.h"

#include <grpcpp/grpcpp.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/giftd_connection_impl.h"
#include "common/agent_socket.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "proto/wire_format_proto.h"

namespace gift::client {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

absl::Status CheckOptions(const ConnectionOptions& o) {
  if (o.job_id.empty()) {
    return absl::InvalidArgumentError("attachment: job_id must be set");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "attachment: rank %d of world size %d", o.rank, o.world_size));
  }
  if (o.local_rank < 0 || o.device < 0) {
    return absl::InvalidArgumentError(
        "attachment: local_rank and device must be >= 0");
  }
  if (o.retry_interval <= absl::ZeroDuration() ||
      o.rpc_timeout <= absl::ZeroDuration() || o.staleness_limit < 1) {
    return absl::InvalidArgumentError(
        "attachment: retry_interval and rpc_timeout must be > 0, "
        "staleness_limit >= 1");
  }
  if (o.format.has_value() && !o.format->valid()) {
    return absl::InvalidArgumentError(
        "attachment: format is not a wire format (e4m3, e5m2, nvfp4, mxfp4)");
  }
  return absl::OkStatus();
}

}  // namespace

GiftdConnection::Impl::Impl(const ConnectionOptions& o, EpochPlan b)
    : options(o),
      base(std::move(b)),
      newest_epoch(std::max(base.epoch(), o.resume.plan_epoch)),
      step(o.resume.step),
      staleness_limit(o.staleness_limit) {
  for (size_t i = 0; i < base.layers().size(); ++i) {
    const BucketLayer& l = base.layers()[i];
    if (l.shape.size() != 2 || l.d_out() < 1 || l.d_in() < 1) continue;
    LayerState s;
    s.plan_index = static_cast<int>(i);
    s.d_in = l.d_in();
    if (auto it = o.resume.factor_versions.find(l.name);
        it != o.resume.factor_versions.end()) {
      s.newest_received = it->second;
      s.window_end[it->second] = o.resume.step;
    }
    by_name[l.name] = static_cast<int>(layers.size());
    layers.push_back(std::move(s));
  }
  auto channel = grpc::CreateChannel("unix:" + options.agent_socket,
                                     grpc::InsecureChannelCredentials());
  stub = v1::Agent::NewStub(channel);
}

absl::StatusOr<std::unique_ptr<GiftdConnection>> GiftdConnection::Create(
    const ConnectionOptions& options, const EpochPlan& base) {
  ConnectionOptions o = options;
  if (o.agent_socket.empty()) o.agent_socket = DefaultAgentSocket();
  RETURN_IF_ERROR(CheckOptions(o));
  auto impl = std::make_unique<Impl>(o, base);
  if (o.device_memory) {
    ASSIGN_OR_RETURN(impl->sketcher,
                     DeviceSketcher::Create(
                         o.device, static_cast<int>(impl->by_name.size())));
  }
  std::vector<std::string> named = o.resume.gift_layers;
  for (const auto& [name, version] : o.resume.factor_versions) {
    named.push_back(name);
  }
  for (const std::string& name : named) {
    if (impl->by_name.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attachment: resume names '", name,
                       "', not a 2-D layer of the plan"));
    }
  }
  {
    absl::MutexLock lock(&impl->mu);
    impl->resume_gate_pending =
        o.resume.plan_epoch > 0 || !o.resume.gift_layers.empty();
  }
  Impl* p = impl.get();
  std::unique_ptr<GiftdConnection> a(new GiftdConnection(std::move(impl)));
  p->TryAttach();  // one synchronous try, so a running daemon is used at once
  p->thread = std::thread([p] { p->Loop(); });
  return a;
}

GiftdConnection::GiftdConnection(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

GiftdConnection::~GiftdConnection() {
  impl_->stop.Notify();
  if (impl_->thread.joinable()) impl_->thread.join();
  absl::MutexLock lock(&impl_->mu);
  if (impl_->mapping == nullptr) return;
  shm::Header(impl_->mapping->block())->detached.store(1);
  v1::DeregisterRequest req;
  req.set_session_id(impl_->mapping->session_id);
  // Unmap first: giftd frees the regions (device memory included) when the
  // session ends.
  impl_->QuiesceDeviceCopies();
  impl_->mapping.reset();
  v1::DeregisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + impl_->options.rpc_timeout));
  impl_->stub->Deregister(&ctx, req, &resp);  // best effort
}

void* GiftdConnection::sketch_stream() const {
  return impl_->sketcher != nullptr ? impl_->sketcher->stream() : nullptr;
}

ConnectionStats GiftdConnection::stats() const {
  absl::MutexLock lock(&impl_->mu);
  ConnectionStats s = impl_->stats;
  s.attached = impl_->mapping != nullptr;
  return s;
}

void GiftdConnection::Impl::Note(const std::string& message, bool rank0_only) {
  if (message == stats.last_error) return;  // log changes, not repeats
  stats.last_error = message;
  if (rank0_only && options.rank != 0) return;
  std::cerr << absl::StrFormat("gift[rank %d]: %s\n", options.rank, message);
}

void GiftdConnection::Impl::Loop() {
  for (;;) {
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu);
      wait = mapping != nullptr ? absl::Milliseconds(heartbeat_ms)
                                : options.retry_interval;
    }
    if (stop.WaitForNotificationWithTimeout(wait)) return;
    bool attached;
    {
      absl::MutexLock lock(&mu);
      attached = mapping != nullptr;
    }
    attached ? Beat() : TryAttach();
  }
}

v1::RegisterRequest GiftdConnection::Impl::MakeRegisterRequest() {
  v1::RegisterRequest r;
  r.set_job_id(options.job_id);
  r.set_rank(options.rank);
  r.set_world_size(options.world_size);
  r.set_local_rank(options.local_rank);
  r.set_pid(::getpid());
  r.set_layout_version(shm::kLayoutVersion);
  r.set_memory(options.device_memory ? v1::MEMORY_KIND_DEVICE
                                     : v1::MEMORY_KIND_HOST);
  r.set_device(options.device);
  if (options.device_memory) {
    absl::StatusOr<std::string> bus = shm::CudaPciBusId(options.device);
    if (bus.ok()) r.set_device_pci_bus_id(*bus);
  }
  for (const LayerState& s : layers) {
    const BucketLayer& l = base.layers()[s.plan_index];
    v1::LayerShape* shape = r.add_layers();
    shape->set_name(l.name);
    shape->set_d_out(l.d_out());
    shape->set_d_in(l.d_in());
    if (s.newest_received >= 0) {
      (*r.mutable_last_factor_version())[l.name] = s.newest_received;
    }
  }
  r.set_last_plan_epoch(newest_epoch);
  r.set_step(step);
  if (options.format.has_value()) r.set_format(ToProto(*options.format));
  if (!resume_registered) {
    for (const std::string& name : options.resume.gift_layers) {
      r.add_resumed_gift_layers(name);
    }
  }
  return r;
}

absl::StatusOr<std::unique_ptr<GiftdConnection::Impl::Mapping>>
GiftdConnection::Impl::Map(const v1::RegisterResponse& response) {
  auto m = std::make_unique<Mapping>();
  m->session_id = response.session_id();
  m->instance = response.daemon_instance();
  shm::RegionDesc desc{};
  desc.kind = static_cast<uint32_t>(shm::RegionKind::kPosix);
  desc.bytes = response.control_block_bytes();
  if (response.control_block().size() >= sizeof(desc.name)) {
    return absl::InvalidArgumentError("control block name too long");
  }
  std::strncpy(desc.name, response.control_block().c_str(),
               sizeof(desc.name) - 1);
  ASSIGN_OR_RETURN(m->control, shm::OpenRegion(desc));
  RETURN_IF_ERROR(shm::CheckControlBlock(m->block(), m->control->bytes()));
  const shm::ControlHeader* h = shm::Header(m->block());
  if (h->n_layers != layers.size()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("control block has %d layers, this rank declared %d",
                        h->n_layers, layers.size()));
  }
  for (uint32_t j = 0; j < h->n_layers; ++j) {
    const shm::LayerEntry* e = shm::Entry(m->block(), j);
    shm::RegionDesc desc = e->region;
    // giftd's number for the GPU may differ (CUDA_VISIBLE_DEVICES); the
    // device sketches record the region's event on this rank's device.
    if (options.device_memory) desc.device = options.device;
    ASSIGN_OR_RETURN(std::unique_ptr<shm::Region> r, shm::OpenRegion(desc));
    std::vector<float> omega0;
    RETURN_IF_ERROR(shm::ReadOmega0(*e, *r, &omega0));
    m->data.push_back(std::move(r));
    m->full.emplace_back();
    m->full_generation.push_back(0);
    m->omega0.push_back(std::move(omega0));
  }
  return m;
}

void GiftdConnection::Impl::TryAttach() {
  v1::RegisterRequest req;
  {
    absl::MutexLock lock(&mu);
    req = MakeRegisterRequest();
  }
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
  absl::Status st =
      FromGrpcStatus(stub->Register(&ctx, req, &resp), "Register");
  absl::StatusOr<std::unique_ptr<Mapping>> m =
      st.ok() ? Map(resp) : absl::StatusOr<std::unique_ptr<Mapping>>(st);
  absl::MutexLock lock(&mu);
  if (!m.ok()) {
    Note(absl::StrCat("giftd not available (", m.status().message(),
                      "); training continues, retrying"));
    return;
  }
  mapping = *std::move(m);
  resume_registered = true;  // a later daemon learns the paths by itself
  heartbeat_ms = std::max(10, resp.heartbeat_interval_ms());
  // Not yet seen to move: the first beat asks over RPC unless it moves.
  daemon_beat_seen = shm::Header(mapping->block())
                         ->daemon_beat.load(std::memory_order_acquire);
  for (LayerState& s : layers) {
    // Windows and Ω belong to a daemon instance; counters to a control block.
    s.open = false;
    s.omega.clear();
    s.omega_version = -1;
    s.instance_newest = -1;
    s.counters = shm::LayerCounters{};
    s.counters.factor_version = -1;
    s.counters.probe_version = -1;
  }
  totals = shm::StepCounters{};
  ++stats.attaches;
  stats.daemon_instance = mapping->instance;
  Note(absl::StrFormat("attached to giftd %s (session %s)", mapping->instance,
                       mapping->session_id));
}

void GiftdConnection::Impl::Beat() {
  v1::HeartbeatRequest req;
  {
    absl::MutexLock lock(&mu);
    if (mapping == nullptr) return;
    shm::ControlHeader* h = shm::Header(mapping->block());
    h->heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
    // The daemon advances daemon_beat at each poll of a session it serves: it
    // moved, so the daemon is alive, keeps this session and reads the beat
    // from the block. Otherwise (dead, stuck, or this session reaped or lost
    // to a restart) the RPC finds out.
    const int32_t beat = h->daemon_beat.load(std::memory_order_acquire);
    const bool polled = beat != daemon_beat_seen;
    daemon_beat_seen = beat;
    if (polled) return;
    ++stats.heartbeat_rpcs;
    req.set_session_id(mapping->session_id);
    req.set_step(step);
  }
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.rpc_timeout));
  absl::Status st =
      FromGrpcStatus(stub->Heartbeat(&ctx, req, &resp), "Heartbeat");
  if (st.ok()) return;
  absl::MutexLock lock(&mu);
  Detach(std::string(st.message()));
}

void GiftdConnection::Impl::Detach(const std::string& why) {
  if (mapping == nullptr) return;
  QuiesceDeviceCopies();
  mapping.reset();
  ++stats.detaches;
  Note(absl::StrCat("lost giftd (", why,
                    "); keeping the last plan and factors, re-attaching"));
}

}  // namespace gift::client
