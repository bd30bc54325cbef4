// gift::QuantizedAllReduce (include/gift/allreduce.h) over
// client::AllReduceEngine, with the factors it holds and, when attached,
// the daemon attachment's work around every step (as the Python session
// does, client/python/native_rank.cc).
#include "gift/allreduce.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/allreduce_engine.h"
#include "client/api/internal.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/telemetry.h"
#include "client/versioned_factors.h"
#include "gift/daemon_attachment.h"

namespace gift {

struct QuantizedAllReduce::Rep {
  std::shared_ptr<Communicator> comm;
  BucketPlan plan;
  AllReduceOptions options;
  std::unique_ptr<client::AllReduceEngine> ar;
  client::VersionedFactors factors;
  // Attached (Attach): the public handle, keeping it alive, and the
  // internal attachment behind it.
  std::shared_ptr<DaemonAttachment> attachment;
  client::GiftdConnection* internal_attachment = nullptr;
  int64_t steps = 0;
  // The overlapped step in progress: busy time of its calls.
  absl::Duration busy;
};

namespace {

StepStats ToStats(const client::StepTelemetry& t, double seconds) {
  StepStats s;
  s.step = t.step;
  s.plan_epoch = t.plan_epoch;
  s.probe_step = t.probe_step;
  s.nonfinite_layers = t.nonfinite_layers;
  s.bytes_euclid = t.bytes_euclid;
  s.bytes_gift = t.bytes_gift;
  s.bytes_control = t.bytes_control;
  s.audit_step = t.audit_step;
  s.bytes_audit = t.bytes_audit;
  s.transform_seconds = t.transform_seconds;
  s.audit_seconds = t.audit_seconds;
  s.seconds = seconds;
  s.layers.reserve(t.layers.size());
  for (const client::LayerTelemetry& l : t.layers) {
    LayerStats o;
    o.name = l.name;
    o.path = static_cast<LayerPath>(l.path);
    o.factor_version = l.factor_version;
    o.elements = l.local.n;
    o.upper = l.local.upper;
    o.lower = l.local.lower;
    o.nonfinite = l.local.nonfinite;
    o.err_sq = l.local.err_sq;
    o.x_sq = l.local.x_sq;
    o.nonfinite_result = l.nonfinite_result;
    o.probed = l.probed;
    o.probe_euclid_rel_l2 = l.probe_euclid_rel_l2;
    o.probe_gift_rel_l2 = l.probe_gift_rel_l2;
    o.audited = l.audited;
    o.audit_rel_l2 = l.audit_rel_l2;
    o.audit_cosine = l.audit_cosine;
    o.drift_audited = l.drift_audited;
    o.audit_drift = l.audit_drift;
    o.drift_steps = l.drift_steps;
    s.layers.push_back(std::move(o));
  }
  return s;
}

// The end of a step (Step, EndStep) with result `s`: fills `stats` and
// hands a successful step's telemetry to the attachment (nullable).
Status FinishStep(const absl::Status& s, const client::AllReduceEngine& ar,
                  client::GiftdConnection* attachment,
                  const client::StepTelemetry& t, double seconds,
                  StepStats* stats) {
  if (stats != nullptr) *stats = ToStats(t, seconds);
  if (!s.ok()) return api::FromAbsl(s);
  if (attachment != nullptr) {
    return api::FromAbsl(attachment->AfterStep(ar, t, seconds));
  }
  return Status();
}

Status CheckOptions(const AllReduceOptions& o) {
  const int mode = static_cast<int>(o.mode);
  if (mode < 0 || mode > 3) {
    return api::InvalidArgument(
        absl::StrCat("QuantizedAllReduce: unknown mode ", mode));
  }
  const int euclid = static_cast<int>(o.euclid_error_feedback);
  if (euclid < 0 || euclid > 2) {
    return api::InvalidArgument(absl::StrCat(
        "QuantizedAllReduce: unknown euclid_error_feedback ", euclid));
  }
  if (!(o.owner_release_cap >= 0) || !std::isfinite(o.owner_release_cap)) {
    return api::InvalidArgument(absl::StrCat(
        "QuantizedAllReduce: owner_release_cap must be finite and >= 0 (0 = "
        "no cap), is ",
        o.owner_release_cap));
  }
  if (o.piece_bytes < 4 || o.probe_interval < 0 || o.audit_interval < 0) {
    return api::InvalidArgument(
        absl::StrCat("QuantizedAllReduce: piece_bytes must be >= 4 (is ",
                     o.piece_bytes, "), probe_interval (", o.probe_interval,
                     ") and audit_interval (", o.audit_interval, ") >= 0"));
  }
  return Status();
}

}  // namespace

static_assert(static_cast<int>(EuclidFeedback::kAuto) ==
                  static_cast<int>(client::EuclidFeedback::kAuto) &&
              static_cast<int>(EuclidFeedback::kOff) ==
                  static_cast<int>(client::EuclidFeedback::kOff) &&
              static_cast<int>(EuclidFeedback::kOn) ==
                  static_cast<int>(client::EuclidFeedback::kOn));
static_assert(static_cast<int>(AllReduceMode::kFp8) ==
                  static_cast<int>(client::AllReduceMode::kFp8) &&
              static_cast<int>(AllReduceMode::kFp32) ==
                  static_cast<int>(client::AllReduceMode::kFp32) &&
              static_cast<int>(AllReduceMode::kBf16) ==
                  static_cast<int>(client::AllReduceMode::kBf16) &&
              static_cast<int>(AllReduceMode::kNcclFp8) ==
                  static_cast<int>(client::AllReduceMode::kNcclFp8));

const char* AllReduceModeName(AllReduceMode mode) {
  const int m = static_cast<int>(mode);
  if (m < 0 || m > 3) return "unknown";
  // The enums share their values (ParseAllReduceMode casts the same way);
  // the internal names are string literals.
  return client::AllReduceModeName(static_cast<client::AllReduceMode>(m))
      .data();
}

Status ParseAllReduceMode(const std::string& name, AllReduceMode* out) {
  if (out == nullptr) {
    return api::InvalidArgument("ParseAllReduceMode: out is null");
  }
  absl::StatusOr<client::AllReduceMode> m = client::ParseAllReduceMode(name);
  if (!m.ok()) return api::FromAbsl(m.status());
  *out = static_cast<AllReduceMode>(*m);
  return Status();
}

Status QuantizedAllReduce::Create(std::shared_ptr<Communicator> comm,
                                  const BucketPlan& plan,
                                  const AllReduceOptions& options,
                                  std::unique_ptr<QuantizedAllReduce>* out) {
  if (out == nullptr) {
    return api::InvalidArgument("QuantizedAllReduce::Create: out is null");
  }
  out->reset();
  if (comm == nullptr) {
    return api::InvalidArgument(
        "QuantizedAllReduce::Create: null communicator");
  }
  if (!plan.valid()) {
    return api::InvalidArgument("QuantizedAllReduce::Create: invalid plan");
  }
  if (Status s = CheckOptions(options); !s.ok()) return s;
  client::AllReduceEngineOptions o;
  o.mode = static_cast<client::AllReduceMode>(options.mode);
  o.piece_bytes = options.piece_bytes;
  o.probe_interval = options.probe_interval;
  o.error_feedback = options.error_feedback;
  o.audit_interval = options.audit_interval;
  o.audit_drift = options.audit_drift;
  o.euclid_error_feedback =
      static_cast<client::EuclidFeedback>(options.euclid_error_feedback);
  o.owner_release_cap = options.owner_release_cap;
  absl::StatusOr<std::unique_ptr<client::AllReduceEngine>> ar =
      client::AllReduceEngine::Create(comm->rep_->comm.get(), plan.rep_->plan,
                                      o);
  if (!ar.ok()) return api::FromAbsl(ar.status());
  auto rep = std::make_unique<Rep>();
  rep->comm = std::move(comm);
  rep->plan = plan;
  rep->options = options;
  rep->ar = *std::move(ar);
  out->reset(new QuantizedAllReduce(std::move(rep)));
  return Status();
}

QuantizedAllReduce::QuantizedAllReduce(std::unique_ptr<Rep> rep)
    : rep_(std::move(rep)) {}

QuantizedAllReduce::~QuantizedAllReduce() {
  // The attachment references the allreduce only inside calls, the
  // allreduce its communicator: release in that order.
  if (rep_->attachment != nullptr) {
    rep_->attachment->rep_->owner.store(nullptr);
    rep_->attachment.reset();
  }
  rep_->ar.reset();
  rep_->comm.reset();
}

Status QuantizedAllReduce::Step(float* bucket, size_t count, StepStats* stats) {
  const int64_t n = rep_->plan.bucket_elements();
  if (bucket == nullptr && n > 0) {
    return api::InvalidArgument("QuantizedAllReduce::Step: bucket is null");
  }
  if (count != static_cast<uint64_t>(n)) {
    return api::InvalidArgument(
        absl::StrCat("QuantizedAllReduce::Step: the bucket has ", count,
                     " floats, the plan needs ", n));
  }
  if (rep_->ar->in_step()) {
    return api::FailedPrecondition(
        "QuantizedAllReduce::Step inside an overlapped step (BeginStep "
        "without EndStep)");
  }
  const absl::Time start = absl::Now();
  if (rep_->internal_attachment != nullptr) {
    absl::Status s =
        rep_->internal_attachment->BeforeStep(rep_->ar.get(), &rep_->factors);
    if (!s.ok()) return api::FromAbsl(s);
  }
  client::StepTelemetry t;
  const absl::Status s = rep_->ar->Run(bucket, rep_->factors, &t);
  ++rep_->steps;
  return FinishStep(s, *rep_->ar, rep_->internal_attachment, t,
                    absl::ToDoubleSeconds(absl::Now() - start), stats);
}

Status QuantizedAllReduce::BeginStep() {
  if (rep_->ar->in_step()) {
    return api::FailedPrecondition(
        "QuantizedAllReduce::BeginStep: the previous step has not ended");
  }
  const absl::Time start = absl::Now();
  rep_->busy = absl::ZeroDuration();
  absl::Status s;
  if (rep_->internal_attachment != nullptr) {
    s = rep_->internal_attachment->BeforeStep(rep_->ar.get(), &rep_->factors);
  }
  // The step opens even when the attachment failed: EndStep closes it and
  // reports the error.
  if (s.ok()) {
    s = rep_->ar->BeginStep(rep_->factors);
  } else {
    (void)rep_->ar->BeginStep(rep_->factors);
  }
  rep_->busy += absl::Now() - start;
  return api::FromAbsl(s);
}

Status QuantizedAllReduce::ReduceBucket(const BucketLayout& layout, float* data,
                                        size_t count) {
  if (!rep_->ar->in_step()) {
    return api::FailedPrecondition(
        "QuantizedAllReduce::ReduceBucket outside BeginStep/EndStep");
  }
  if (layout.elements < 0 || count != static_cast<uint64_t>(layout.elements)) {
    return api::InvalidArgument(
        absl::StrCat("QuantizedAllReduce::ReduceBucket: the buffer has ", count,
                     " floats, the layout says ", layout.elements));
  }
  if (data == nullptr && count > 0) {
    return api::InvalidArgument(
        "QuantizedAllReduce::ReduceBucket: data is null");
  }
  if (layout.layers.size() != layout.offsets.size()) {
    return api::InvalidArgument(
        absl::StrCat("QuantizedAllReduce::ReduceBucket: ", layout.layers.size(),
                     " layers but ", layout.offsets.size(), " offsets"));
  }
  client::BucketGroup g;
  g.layers = layout.layers;
  g.offsets = layout.offsets;
  g.elements = layout.elements;
  const absl::Time start = absl::Now();
  const absl::Status s = rep_->ar->RunBucket(g, data);
  rep_->busy += absl::Now() - start;
  return api::FromAbsl(s);
}

Status QuantizedAllReduce::EndStep(StepStats* stats) {
  if (!rep_->ar->in_step()) {
    return api::FailedPrecondition(
        "QuantizedAllReduce::EndStep without BeginStep");
  }
  const absl::Time start = absl::Now();
  client::StepTelemetry t;
  const absl::Status s = rep_->ar->EndStep(&t);
  ++rep_->steps;
  rep_->busy += absl::Now() - start;
  return FinishStep(s, *rep_->ar, rep_->internal_attachment, t,
                    absl::ToDoubleSeconds(rep_->busy), stats);
}

Status QuantizedAllReduce::AddPlan(const BucketPlan& plan) {
  if (!plan.valid()) {
    return api::InvalidArgument("QuantizedAllReduce::AddPlan: invalid plan");
  }
  return api::FromAbsl(rep_->ar->AddPlan(plan.rep_->plan));
}

Status QuantizedAllReduce::PutFactor(const std::string& layer,
                                     const GiftFactor& factor) {
  const int i = rep_->plan.FindLayer(layer);
  if (i < 0 || rep_->plan.layers()[i].shape.size() != 2) {
    return api::InvalidArgument(absl::StrCat("QuantizedAllReduce::PutFactor: '",
                                             layer,
                                             "' is not a 2-D layer of "
                                             "the plan"));
  }
  const int kind = static_cast<int>(factor.kind);
  if (kind < 0 || kind > 1) {
    return api::InvalidArgument(absl::StrCat(
        "QuantizedAllReduce::PutFactor: unknown transform ", kind));
  }
  client::LayerFactor f;
  f.version = factor.version;
  f.kind = static_cast<client::GiftTransform>(kind);
  f.d_in = factor.d_in;
  f.r = factor.r;
  f.u = factor.u;
  f.c = factor.c;
  f.c_inv = factor.c_inv;
  f.t = factor.t;
  f.t_inv = factor.t_inv;
  const absl::Status valid = f.Validate(rep_->plan.layers()[i].shape[1]);
  if (!valid.ok()) {
    return api::InvalidArgument(absl::StrCat("QuantizedAllReduce::PutFactor '",
                                             layer, "': ", valid.message()));
  }
  return api::FromAbsl(rep_->factors.Put(layer, std::move(f)));
}

Status QuantizedAllReduce::SetAuditInterval(int steps) {
  if (steps < 0) {
    return api::InvalidArgument(absl::StrCat(
        "QuantizedAllReduce::SetAuditInterval: negative interval ", steps));
  }
  const absl::Status s = rep_->ar->set_audit_interval(steps);
  if (s.ok()) rep_->options.audit_interval = steps;
  return api::FromAbsl(s);
}

Status QuantizedAllReduce::Attach(
    std::shared_ptr<DaemonAttachment> attachment) {
  if (rep_->ar->in_step()) {
    return api::FailedPrecondition(
        "QuantizedAllReduce::Attach inside an overlapped step");
  }
  if (attachment == rep_->attachment) return Status();
  if (attachment != nullptr) {
    if (!attachment->rep_->base.SameLayout(rep_->plan)) {
      return api::InvalidArgument(
          "QuantizedAllReduce::Attach: the attachment's base plan does not "
          "have this allreduce's layout (bucket size, layer names, shapes, "
          "offsets)");
    }
    const void* expected = nullptr;
    if (!attachment->rep_->owner.compare_exchange_strong(expected, this)) {
      return api::FailedPrecondition(
          "QuantizedAllReduce::Attach: the attachment serves another "
          "allreduce");
    }
  }
  if (rep_->attachment != nullptr) {
    rep_->attachment->rep_->owner.store(nullptr);
  }
  rep_->attachment = std::move(attachment);
  rep_->internal_attachment = rep_->attachment != nullptr
                                  ? rep_->attachment->rep_->attachment.get()
                                  : nullptr;
  return Status();
}

const BucketPlan& QuantizedAllReduce::plan() const { return rep_->plan; }

const AllReduceOptions& QuantizedAllReduce::options() const {
  return rep_->options;
}

std::shared_ptr<Communicator> QuantizedAllReduce::communicator() const {
  return rep_->comm;
}

int64_t QuantizedAllReduce::current_epoch() const {
  return rep_->ar->current_epoch();
}

int64_t QuantizedAllReduce::steps() const { return rep_->steps; }

void* QuantizedAllReduce::stream() const { return rep_->ar->stream(); }

}  // namespace gift
