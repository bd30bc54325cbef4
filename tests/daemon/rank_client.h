// What every rank binary of giftd's tests and benchmark (rank_worker.cc,
// gpu_rank_worker.cc, bench/daemon/bench_rank.cc) sets up before its first
// step: the rendezvous store, the communicator, the AllReduceEngine of
// its bucket plan and the GiftdConnection to the node's giftd; and the
// JSON-lines report they write, one line a step.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<RankClient> s,
//                    RankClient::Connect(flags, plan, RankDevice{}));
//   ASSIGN_OR_RETURN(std::unique_ptr<JsonLinesFile> report,
//                    JsonLinesFile::Open(flags.report));
//   RETURN_IF_ERROR(s->att->BeforeStep(s->ar.get(), &factors));
//   ...
//   const client::ConnectionStats st = s->att->stats();
//   nlohmann::json line = s->StepLine(step, telemetry, run_seconds, st);
//   line["stale_drops"] = st.stale_drops;
//   report->Write(line);
//
// Thread safety: used by the rank's one main thread.
#ifndef GIFT_TESTS_DAEMON_RANK_CLIENT_H_
#define GIFT_TESTS_DAEMON_RANK_CLIENT_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/allreduce_engine.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/telemetry.h"
#include "client/transport.h"
#include "client/transport_setup.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/rank_testutil.h"

namespace gift::testing_daemon {

// Where a rank's bucket lives.
struct RankDevice {
  // false: host memory, Gloo. true: device memory on `device`, NCCL, and
  // giftd asked for CUDA IPC data regions. Default: false.
  bool on_device = false;
  // The CUDA device when on_device. Default: 0.
  int device = 0;
};

struct RankClient {
  // Store (flags.store "daemon": giftd's store, else a FileStore in that
  // directory), communicator (keys under "grad/"; a Gloo communicator
  // listens on $GIFT_NETNS_ADDR when set, as in scripts/netns.sh exec, else
  // on 127.0.0.1), allreduce with
  // flags.probe_interval and the attachment (local rank = rank, retry every
  // 200 ms).
  static absl::StatusOr<std::unique_ptr<RankClient>> Connect(
      const RankFlags& flags, const client::EpochPlan& plan,
      const RankDevice& device);

  // A step's report line: {step, epoch (agreed), attached, attaches (from
  // `st`, the attachment's stats taken once for the whole line), run_ms,
  // layers: {name: {path, version}}}; a binary adds its own fields.
  nlohmann::json StepLine(int64_t step, const client::StepTelemetry& t,
                          double run_seconds,
                          const client::ConnectionStats& st) const;

  // Destroyed last to first: the attachment before the allreduce it
  // feeds, the stores after the communicator.
  client::TransportSetup setup;
  client::Transport* comm = nullptr;  // setup.comm
  std::unique_ptr<client::AllReduceEngine> ar;
  std::unique_ptr<client::GiftdConnection> att;
};

// A report of one JSON object a line, flushed after each line so that a
// reader never waits on a buffered step (it may see a half-written last
// line). With an empty path it writes nothing.
class JsonLinesFile {
 public:
  // INTERNAL when `path` cannot be written.
  static absl::StatusOr<std::unique_ptr<JsonLinesFile>> Open(
      const std::string& path);
  ~JsonLinesFile();
  JsonLinesFile(const JsonLinesFile&) = delete;
  JsonLinesFile& operator=(const JsonLinesFile&) = delete;

  void Write(const nlohmann::json& line);

 private:
  explicit JsonLinesFile(std::FILE* file) : file_(file) {}
  std::FILE* const file_;  // null: no report
};

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_RANK_CLIENT_H_
