#include "tests/daemon/rank_client.h"

#include <cstdlib>
#include <utility>

#include "absl/time/time.h"
#include "client/transport_setup.h"
#include "common/status_macros.h"

namespace gift::testing_daemon {

absl::StatusOr<std::unique_ptr<RankClient>> RankClient::Connect(
    const RankFlags& f, const client::EpochPlan& plan,
    const RankDevice& device) {
  auto s = std::make_unique<RankClient>();
  client::TransportSetupOptions co;
  if (device.on_device) {
    co.backend = "nccl";
    co.device = device.device;
  }
  co.rank = f.rank;
  co.world_size = f.world_size;
  co.timeout = absl::Seconds(f.comm_timeout_s);
  if (f.store == "daemon") {
    co.daemon_store = true;
    co.agent_socket = f.agent_socket;
    co.job_id = f.job;
  } else {
    co.store_dir = f.store;
  }
  co.key_prefix = "grad/";
  // In a network namespace of scripts/netns.sh the ranks of other nodes
  // reach this one only at the namespace's own address.
  const char* addr = std::getenv("GIFT_NETNS_ADDR");
  co.hostname = addr != nullptr ? addr : "127.0.0.1";
  ASSIGN_OR_RETURN(s->setup, client::SetUpTransport(co));
  s->comm = s->setup.comm.get();
  client::AllReduceEngineOptions qo;
  qo.probe_interval = f.probe_interval;
  qo.audit_drift = f.audit_drift != 0;
  ASSIGN_OR_RETURN(s->ar, client::AllReduceEngine::Create(s->comm, plan, qo));
  client::ConnectionOptions ao;
  ao.agent_socket = f.agent_socket;
  ao.job_id = f.job;
  ao.rank = f.rank;
  ao.world_size = f.world_size;
  ao.local_rank = f.rank;
  ao.device_memory = device.on_device;
  if (device.on_device) ao.device = device.device;
  ao.retry_interval = absl::Milliseconds(200);
  ASSIGN_OR_RETURN(s->att, client::GiftdConnection::Create(ao, plan));
  return s;
}

absl::StatusOr<std::unique_ptr<JsonLinesFile>> JsonLinesFile::Open(
    const std::string& path) {
  std::FILE* file = nullptr;
  if (!path.empty()) {
    file = std::fopen(path.c_str(), "w");
    if (file == nullptr) return absl::InternalError("cannot write " + path);
  }
  return std::unique_ptr<JsonLinesFile>(new JsonLinesFile(file));
}

JsonLinesFile::~JsonLinesFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonLinesFile::Write(const nlohmann::json& line) {
  if (file_ == nullptr) return;
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

nlohmann::json RankClient::StepLine(int64_t step,
                                    const client::StepTelemetry& t,
                                    double run_seconds,
                                    const client::ConnectionStats& st) const {
  nlohmann::json layers = nlohmann::json::object();
  for (const client::LayerTelemetry& l : t.layers) {
    layers[l.name] = {{"path", client::LayerPathName(l.path)},
                      {"version", l.factor_version}};
  }
  return {{"step", step},
          {"epoch", ar->current_epoch()},
          {"attached", st.attached},
          {"attaches", st.attaches},
          {"run_ms", run_seconds * 1e3},
          {"layers", std::move(layers)}};
}

}  // namespace gift::testing_daemon
