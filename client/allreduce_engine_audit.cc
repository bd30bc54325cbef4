// The audit steps of AllReduceEngine (fp8 mode): the drift sums kept
// before each round and, on an agreed audit step, the FP32 allreduce of
// the same local gradients that the applied ones are compared against; and
// the probe interval's setter beside the audit interval's.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/allreduce_engine.h"
#include "common/status_macros.h"

namespace gift::client {

namespace {

// Sets `*interval` to `steps` (>= 0; 0 = never), else INVALID_ARGUMENT
// naming `what`.
absl::Status SetInterval(const char* what, int steps, int* interval) {
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " interval must be >= 0 (is ", steps, ")"));
  }
  *interval = steps;
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReduceEngine::set_audit_interval(int steps) {
  return SetInterval("audit", steps, &audit_interval_);
}

absl::Status AllReduceEngine::set_probe_interval(int steps) {
  return SetInterval("probe", steps, &probe_interval_);
}

absl::Status AllReduceEngine::AuditBefore(const Group& g, const float* data) {
  const std::vector<BucketLayer>& layers = g.plan.layers();
  const bool audit = step_ctx_.t.audit_step;
  const bool sums = audit && step_ctx_.drift_agreed;
  const int64_t m = g.plan.communicated_elements();
  if (audit) {
    const size_t bytes = (sums ? 2 : 1) * m * sizeof(float);
    if (audit_->data() == nullptr || audit_->bytes() < bytes) {
      RETURN_IF_ERROR(audit_->Resize(bytes));
    }
  }
  for (size_t j = 0; j < layers.size(); ++j) {
    const BucketLayer& l = layers[j];
    const int64_t n = l.size();
    if (n == 0) continue;
    const float* x = data + l.offset;
    if (step_ctx_.drift) {
      DriftSums& d = drift_[l.name];
      for (std::unique_ptr<Fp8Buffer>* b : {&d.local, &d.applied}) {
        if (*b == nullptr) *b = backend_->memory().NewBuffer();
        if ((*b)->data() == nullptr || (*b)->bytes() != n * sizeof(float)) {
          RETURN_IF_ERROR((*b)->Resize(n * sizeof(float)));
          RETURN_IF_ERROR((*b)->Zero());
        }
      }
      RETURN_IF_ERROR(backend_->math().AddInPlace(d.local->floats(), x, n));
    }
    if (!audit) continue;
    // Copies as 0 + x (the backends have no plain copy).
    float* dst = audit_->floats() + g.plan.packed_offset(j);
    RETURN_IF_ERROR(backend_->memory().Zero(dst, n * sizeof(float)));
    RETURN_IF_ERROR(backend_->math().AddInPlace(dst, x, n));
    if (sums) {
      RETURN_IF_ERROR(backend_->memory().Zero(dst + m, n * sizeof(float)));
      RETURN_IF_ERROR(backend_->math().AddInPlace(
          dst + m, drift_[l.name].local->floats(), n));
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduceEngine::AuditAfter(const Group& g, float* data,
                                         StepTelemetry* t) {
  const std::vector<BucketLayer>& layers = g.plan.layers();
  const bool audit = step_ctx_.t.audit_step;
  for (size_t j = 0; j < layers.size(); ++j) {
    const BucketLayer& l = layers[j];
    if (!step_ctx_.drift || l.size() == 0) continue;
    DriftSums& d = drift_.at(l.name);
    if (t->layers[j].nonfinite_result) {  // restart this layer's sums
      RETURN_IF_ERROR(d.local->Zero());
      RETURN_IF_ERROR(d.applied->Zero());
    } else {
      RETURN_IF_ERROR(backend_->math().AddInPlace(d.applied->floats(),
                                                  data + l.offset, l.size()));
    }
  }
  if (!audit) return absl::OkStatus();
  const bool sums = step_ctx_.drift_agreed;
  const int64_t m = g.plan.communicated_elements();
  const int64_t total = (sums ? 2 : 1) * m;
  float* avg = audit_->floats();
  if (total > 0) {
    const uint64_t before = comm_->bytes_sent().Total();
    RETURN_IF_ERROR(
        comm_->AllReduce(avg, avg, total, DataType::kFloat32, ReduceOp::kSum));
    t->bytes_audit += comm_->bytes_sent().Total() - before;
    RETURN_IF_ERROR(backend_->math().Divide(
        avg, total, static_cast<float>(comm_->world_size())));
  }
  RETURN_IF_ERROR(backend_->compare().BeginCompare(2 * layers.size()));
  for (size_t j = 0; j < layers.size(); ++j) {
    const BucketLayer& l = layers[j];
    if (l.size() == 0 || t->layers[j].nonfinite_result) continue;
    const int64_t p = g.plan.packed_offset(j);
    RETURN_IF_ERROR(
        backend_->compare().Compare(avg + p, data + l.offset, l.size(), 2 * j));
    if (sums) {
      RETURN_IF_ERROR(backend_->compare().Compare(
          avg + m + p, drift_.at(l.name).applied->floats(), l.size(),
          2 * j + 1));
    }
  }
  std::vector<kernels::QuantizeStats> cmp;
  RETURN_IF_ERROR(backend_->compare().EndCompare(&cmp));
  for (size_t j = 0; j < layers.size(); ++j) {
    LayerTelemetry& lt = t->layers[j];
    if (layers[j].size() == 0 || lt.nonfinite_result) continue;
    lt.audited = true;
    lt.audit_rel_l2 = cmp[2 * j].RelL2();
    lt.audit_cosine = cmp[2 * j].Cosine();
    if (sums) {
      lt.drift_audited = true;
      lt.audit_drift = cmp[2 * j + 1].RelL2();
      lt.drift_steps = drift_steps_ + 1;
    }
    // Every rank restarts its sums at the same (agreed) audit step.
    if (step_ctx_.drift) {
      DriftSums& d = drift_.at(layers[j].name);
      RETURN_IF_ERROR(d.local->Zero());
      RETURN_IF_ERROR(d.applied->Zero());
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::client
