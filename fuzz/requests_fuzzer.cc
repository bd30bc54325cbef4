// libFuzzer target: what a rank (Agent), an operator (Control) or another
// daemon of the job (Peer) can send giftd, from the bytes on the wire to the
// daemon's validation: bytes → ParseFromString → the request checks of
// daemon/core/request_limits.h → the DaemonCore / PeerHandler method the gRPC
// service calls (daemon/grpc/grpc_services.cc,
// daemon/peer/peer_link_server.cc), on a real Daemon: the leader of job "job"
// on an in-process peer network (daemon/peer/fake_peer_link.h), with one
// registered rank and small limits, so that an accepted request stays cheap.
// The Peer service's own admission (token, job id, leader-only, layout version)
// is applied as the service applies it.
//
// Input: one byte choosing the request kind (kKinds below, modulo), then
// the serialized request. In a Heartbeat or Deregister, the session id "S"
// stands for the registered rank's session. Every outcome is a status: the
// target checks "no crash, no sanitizer report, no leak, no hang", that a
// Register the pure checks refuse is refused by the daemon too, and that
// GetStatus still answers after every request.
//
// GIFT_FUZZ_WRITE_SEEDS=DIR writes the seed corpus (one valid request of
// each kind) into DIR and exits (fuzz/corpus/requests was made so).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/core/daemon.h"
#include "daemon/core/request_limits.h"
#include "daemon/metrics/metrics.h"
#include "daemon/peer/fake_peer_link.h"
#include "gift/v1/agent.pb.h"
#include "gift/v1/control.pb.h"
#include "gift/v1/peer.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "shm/layout.h"

namespace {

using namespace gift;
using namespace gift::daemon;

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_requests: %s: %s\n", what, detail.c_str());
  std::abort();
}

enum Kind : uint8_t {
  kRegister,
  kHeartbeat,
  kDeregister,
  kStoreSet,
  kStoreGet,
  kStoreAdd,
  kGetStatus,
  kListLayers,
  kSetLayerPolicy,
  kSetRefreshInterval,
  kSetRank,
  kSetSelectionPolicy,
  kTriggerRefresh,
  kPeerJoin,
  kPeerTelemetry,
  kPeerSketch,
  kPeerFactor,
  kPeerControl,
  kPeerStoreSet,
  kPeerStoreGet,
  kPeerStoreAdd,
  kPoll,              // no request: one poll cycle and a telemetry snapshot
  kSetAuditInterval,  // after kPoll: the kinds of the seeds stay as written
  kKinds
};

constexpr char kJob[] = "job";
constexpr char kSelf[] = "fz0:1";

v1::RegisterRequest MainRequest() {
  v1::RegisterRequest r;
  r.set_job_id(kJob);
  r.set_rank(0);
  r.set_world_size(2);
  r.set_pid(::getpid());
  r.set_layout_version(shm::kLayoutVersion);
  r.set_memory(v1::MEMORY_KIND_HOST);
  for (auto [name, d_in] : {std::pair{"fc1", 24}, std::pair{"fc2", 48}}) {
    v1::LayerShape* l = r.add_layers();
    l->set_name(name);
    l->set_d_out(16);
    l->set_d_in(d_in);
  }
  return r;
}

struct World {
  std::string token_file;
  std::unique_ptr<FakePeerNetwork> net;
  std::unique_ptr<metrics::Registry> registry;
  std::unique_ptr<Daemon> daemon;
  DaemonConfig config;
  std::string session;  // the registered rank's

  void EnsureSession() {
    v1::HeartbeatRequest h;
    h.set_session_id(session);
    if (!session.empty() && daemon->Heartbeat(h).ok()) return;
    absl::StatusOr<v1::RegisterResponse> r = daemon->Register(MainRequest());
    if (!r.ok()) Fail("the rank cannot register", r.status().ToString());
    session = r->session_id();
  }
};

World* Setup() {
  auto* w = new World;
  const std::string pid = absl::StrCat(::getpid());
  w->token_file = absl::StrCat("/tmp/gift-fuzz-requests-", pid, ".token");
  std::ofstream(w->token_file) << "fuzz-token\n";
  absl::StatusOr<DaemonConfig> c = LoadConfigFromString(
      "", "",
      {"--node=fz0", absl::StrCat("--shm-prefix=/gift-fuzzreq", pid),
       "--metrics-address=", "--log-level=error", "--refresh-threads=1",
       // The poll runs when the input asks (kPoll), not on a timer; ranks
       // are never reaped for silence.
       "--poll-interval-ms=86400000", "--peer-timeout-ms=172800000",
       "--heartbeat-interval-ms=1000", "--rank-timeout-ms=172800000",
       "--job-id=job", absl::StrCat("--peer-address=", kSelf),
       absl::StrCat("--leader-address=", kSelf),
       absl::StrCat("--job-token-file=", w->token_file), "--rank=4",
       "--max-rank=8", "--max-layers=8", "--max-layer-d-in=64",
       "--max-layer-d-out=64", "--max-rank-shm-bytes=4194304",
       "--max-local-ranks=8", "--max-sessions-per-pid=8",
       "--max-store-value-bytes=4096", "--max-store-job-bytes=65536",
       "--max-store-jobs=2"});
  if (!c.ok()) Fail("config", c.status().ToString());
  w->config = *c;
  w->net = std::make_unique<FakePeerNetwork>();
  w->registry = std::make_unique<metrics::Registry>();
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Create(w->config, w->registry.get(), w->net->Factory());
  if (!d.ok()) Fail("Daemon::Create", d.status().ToString());
  w->daemon = *std::move(d);
  std::remove(w->token_file.c_str());
  w->EnsureSession();
  return w;
}

template <typename M>
bool Parse(const uint8_t* data, size_t size, M* m) {
  return m->ParseFromArray(data, static_cast<int>(size));
}

void Substitute(World& w, std::string* session_id) {
  if (*session_id == "S") *session_id = w.session;
}

// The Register checks that need no daemon state (request_limits.h), as the
// daemon runs them first.
bool RegisterPasses(const v1::RegisterRequest& r, const Limits& limits) {
  if (!CheckRegisterRequest(r, limits).ok()) return false;
  std::vector<shm::LayerDecl> decls;
  std::vector<bool> full;
  for (const v1::LayerShape& l : r.layers()) {
    const int32_t r_cap = static_cast<int32_t>(std::min<int64_t>(l.d_in(), 8));
    decls.push_back({l.name(), l.d_out(), l.d_in(), r_cap});
    full.push_back(false);
  }
  (void)SessionShmBytes(decls, full, limits);
  return true;
}

void Run(World& w, Kind kind, const uint8_t* data, size_t size) {
  Daemon& d = *w.daemon;
  switch (kind) {
    case kRegister: {
      v1::RegisterRequest r;
      if (!Parse(data, size, &r)) return;
      const bool passes = RegisterPasses(r, w.config.limits);
      absl::StatusOr<v1::RegisterResponse> out = d.Register(r);
      if (out.ok() && !passes) {
        Fail("Register accepted a request CheckRegisterRequest refuses",
             r.ShortDebugString());
      }
      if (out.ok() && out->session_id() != w.session) {
        v1::DeregisterRequest dr;
        dr.set_session_id(out->session_id());
        (void)d.Deregister(dr);
      }
      return;
    }
    case kHeartbeat: {
      v1::HeartbeatRequest r;
      if (!Parse(data, size, &r)) return;
      Substitute(w, r.mutable_session_id());
      (void)d.Heartbeat(r);
      return;
    }
    case kDeregister: {
      v1::DeregisterRequest r;
      if (!Parse(data, size, &r)) return;
      Substitute(w, r.mutable_session_id());
      (void)d.Deregister(r);
      return;
    }
    case kStoreSet: {
      v1::StoreSetRequest r;
      if (Parse(data, size, &r)) (void)d.StoreSet(r);
      return;
    }
    case kStoreGet: {
      v1::StoreGetRequest r;
      if (Parse(data, size, &r)) (void)d.StoreGet(r, absl::ZeroDuration());
      return;
    }
    case kStoreAdd: {
      v1::StoreAddRequest r;
      if (Parse(data, size, &r)) (void)d.StoreAdd(r);
      return;
    }
    case kGetStatus: {
      v1::GetStatusRequest r;
      if (Parse(data, size, &r)) (void)d.GetStatus(r);
      return;
    }
    case kListLayers: {
      v1::ListLayersRequest r;
      if (Parse(data, size, &r)) (void)d.ListLayers(r);
      return;
    }
    case kSetLayerPolicy: {
      v1::SetLayerPolicyRequest r;
      if (Parse(data, size, &r)) (void)d.SetLayerPolicy(r);
      return;
    }
    case kSetRefreshInterval: {
      v1::SetRefreshIntervalRequest r;
      if (Parse(data, size, &r)) (void)d.SetRefreshInterval(r);
      return;
    }
    case kSetAuditInterval: {
      v1::SetAuditIntervalRequest r;
      if (Parse(data, size, &r)) (void)d.SetAuditInterval(r);
      return;
    }
    case kSetRank: {
      v1::SetRankRequest r;
      if (Parse(data, size, &r)) (void)d.SetRank(r);
      return;
    }
    case kSetSelectionPolicy: {
      v1::SetSelectionPolicyRequest r;
      if (Parse(data, size, &r)) (void)d.SetSelectionPolicy(r);
      return;
    }
    case kTriggerRefresh: {
      v1::TriggerRefreshRequest r;
      if (Parse(data, size, &r)) (void)d.TriggerRefresh(r);
      return;
    }
    // The Peer service admits a request of this job only (the token is the
    // transport's); Join, telemetry, control and the store go to the leader,
    // which this daemon is. Join also needs the same layout version.
    case kPeerJoin: {
      v1::JoinRequest r;
      if (!Parse(data, size, &r) || r.job_id() != kJob ||
          r.layout_version() != shm::kLayoutVersion) {
        return;
      }
      (void)d.OnJoin(r);
      return;
    }
    case kPeerTelemetry: {
      v1::ReportTelemetryRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnTelemetry(r);
      return;
    }
    case kPeerSketch: {
      v1::PushSketchRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnSketch(r);
      return;
    }
    case kPeerFactor: {
      v1::PublishFactorRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnFactor(r);
      return;
    }
    case kPeerControl: {
      v1::ForwardControlRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnControl(r);
      return;
    }
    case kPeerStoreSet: {
      v1::StoreSetRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnStoreSet(r);
      return;
    }
    case kPeerStoreGet: {
      v1::StoreGetRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) {
        (void)d.OnStoreGet(r, absl::ZeroDuration());
      }
      return;
    }
    case kPeerStoreAdd: {
      v1::StoreAddRequest r;
      if (Parse(data, size, &r) && r.job_id() == kJob) (void)d.OnStoreAdd(r);
      return;
    }
    case kPoll:
    case kKinds:
      d.PollOnce();
      (void)d.Snapshot();
      return;
  }
}

void WriteSeed(const std::string& dir, const std::string& name, Kind kind,
               const google::protobuf::Message& m) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.put(static_cast<char>(kind));
  out << m.SerializeAsString();
}

void WriteSeeds(const std::string& dir) {
  v1::RegisterRequest reg = MainRequest();
  reg.set_rank(1);
  WriteSeed(dir, "register_rank1", kRegister, reg);
  v1::RegisterRequest reattach = MainRequest();
  reattach.set_last_plan_epoch(3);
  reattach.set_step(100);
  (*reattach.mutable_last_factor_version())["fc1"] = 2;
  reattach.add_resumed_gift_layers("fc1");
  WriteSeed(dir, "register_reattach", kRegister, reattach);
  v1::HeartbeatRequest hb;
  hb.set_session_id("S");
  hb.set_step(7);
  WriteSeed(dir, "heartbeat", kHeartbeat, hb);
  v1::DeregisterRequest dr;
  dr.set_session_id("S");
  WriteSeed(dir, "deregister", kDeregister, dr);
  v1::StoreSetRequest set;
  set.set_job_id(kJob);
  set.set_key("rank0/addr");
  set.set_value("127.0.0.1:1234");
  WriteSeed(dir, "store_set", kStoreSet, set);
  WriteSeed(dir, "peer_store_set", kPeerStoreSet, set);
  v1::StoreGetRequest get;
  get.set_job_id(kJob);
  get.set_key("rank0/addr");
  WriteSeed(dir, "store_get", kStoreGet, get);
  WriteSeed(dir, "peer_store_get", kPeerStoreGet, get);
  v1::StoreAddRequest add;
  add.set_job_id(kJob);
  add.set_key("barrier");
  add.set_delta(1);
  WriteSeed(dir, "store_add", kStoreAdd, add);
  WriteSeed(dir, "peer_store_add", kPeerStoreAdd, add);
  WriteSeed(dir, "get_status", kGetStatus, v1::GetStatusRequest());
  WriteSeed(dir, "list_layers", kListLayers, v1::ListLayersRequest());
  v1::SetLayerPolicyRequest pol;
  pol.set_layer("fc2");
  pol.mutable_settings()->set_pin(v1::PIN_IN);
  pol.mutable_settings()->set_transform(v1::TRANSFORM_FULL);
  pol.mutable_settings()->set_rank(4);
  WriteSeed(dir, "set_layer_policy", kSetLayerPolicy, pol);
  v1::SetRefreshIntervalRequest k;
  k.set_steps(25);
  WriteSeed(dir, "set_refresh_interval", kSetRefreshInterval, k);
  v1::SetAuditIntervalRequest audit;
  audit.set_steps(7);
  WriteSeed(dir, "set_audit_interval", kSetAuditInterval, audit);
  v1::SetRankRequest rank;
  rank.set_rank(2);
  WriteSeed(dir, "set_rank", kSetRank, rank);
  v1::SetSelectionPolicyRequest sel;
  sel.mutable_policy()->set_top_k(2);
  WriteSeed(dir, "set_selection_policy", kSetSelectionPolicy, sel);
  v1::TriggerRefreshRequest tr;
  tr.set_layer("fc1");
  WriteSeed(dir, "trigger_refresh", kTriggerRefresh, tr);
  v1::JoinRequest join;
  join.set_job_id(kJob);
  join.set_layout_version(shm::kLayoutVersion);
  WriteSeed(dir, "peer_join", kPeerJoin, join);
  v1::ReportTelemetryRequest tel;
  tel.set_job_id(kJob);
  WriteSeed(dir, "peer_telemetry", kPeerTelemetry, tel);
  v1::PushSketchRequest sk;
  sk.set_job_id(kJob);
  WriteSeed(dir, "peer_sketch", kPeerSketch, sk);
  v1::PublishFactorRequest pf;
  pf.set_job_id(kJob);
  WriteSeed(dir, "peer_factor", kPeerFactor, pf);
  v1::ForwardControlRequest fc;
  fc.set_job_id(kJob);
  *fc.mutable_set_layer_policy() = pol;
  WriteSeed(dir, "peer_control", kPeerControl, fc);
  WriteSeed(dir, "poll", kPoll, v1::GetStatusRequest());
}

World* world = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs every string field that is not UTF-8; the parse fails
  // and the target drops the input, so the lines are noise here.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  if (const char* dir = std::getenv("GIFT_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (world == nullptr) {
    world = Setup();
    // The daemon unlinks its shared memory when it goes, at a normal exit.
    std::atexit([] { world->daemon.reset(); });
  }
  if (size == 0) return 0;
  World& w = *world;
  Run(w, static_cast<Kind>(data[0] % kKinds), data + 1, size - 1);
  w.EnsureSession();
  absl::StatusOr<v1::GetStatusResponse> status =
      w.daemon->GetStatus(v1::GetStatusRequest());
  if (!status.ok()) Fail("GetStatus failed", status.status().ToString());
  return 0;
}
