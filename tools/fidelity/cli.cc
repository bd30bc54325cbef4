#include "tools/fidelity/cli.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "tools/fidelity/geometry.h"
#include "tools/fidelity/method.h"
#include "tools/fidelity/report.h"
#include "tools/fidelity/round_trip.h"
#include "tools/fidelity/transform.h"
#include "tools/fidelity/workers.h"

namespace gift::fidelity {
namespace {

constexpr char kUsage[] =
    R"(usage: gift-fidelity --grad W.npy [--a A.npy] [--g G.npy] [--acts X.npy]
                     [--methods LIST] [--format FMT] [--json]
       gift-fidelity --grad-workers GW.npy [--a A.npy | --acts X.npy] ...

Measures how much of a layer's gradient survives FP8 (or 4-bit)
communication, for the Euclidean baseline and the geometry-aware transforms
of GIFT (DESIGN.md §2).

Inputs (.npy, little-endian float32 '<f4', C order):
  --grad W.npy          gradient [d_out, d_in]
  --grad-workers GW.npy per-worker gradients [R, d_out, d_in], or a sequence
                        [T, R, d_out, d_in]: worker mode (below)
  --a A.npy             input second moment A = E[a a^T] [d_in, d_in]
                        (symmetric PSD)
  --g G.npy             output second moment G = E[d d^T] [d_out, d_out]
                        (symmetric PSD)
  --acts X.npy          layer inputs [rows, d_in]; A = X^T X / rows unless
                        --a is given; enables the Nystrom methods
Options:
  --methods LIST        comma-separated methods (default below)
  --format FMT          e4m3 (default, max 448), e5m2 (max 57344), or the
                        block-scaled 4-bit nvfp4 (E2M1, an E4M3 scale per
                        16 elements and an FP32 scale per tensor) or mxfp4
                        (E2M1, an E8M0 scale per 32 elements), blocks along
                        the row-major flattening (rows of d_in)
  --json                JSON on stdout instead of a table
  --help                this text

One-step round trip, per method: W~ = transform(W) (float64) -> float32 ->
FP8 quantize (per-tensor scale s = amax/fmax, s = 1 for zeros) -> dequantize
-> back-transform (float64) -> Ŵ (4-bit: block scales as above instead).
Metrics against W: rel_l2 = |Ŵ-W|_F/|W|_F, cos, max_err = max|Ŵ-W|,
mse = mean (Ŵ-W)^2.

Methods (gamma(S) = 1e-3 tr(S)/dim; beta a positive decimal like 1.0):
  euclid              no transform, one scale per tensor
  euclid_block<B>     no transform, one scale per B consecutive elements
                      (row-major), e.g. euclid_block512 (FP8 only; with a
                      4-bit format the same as euclid)
  diagA               T = diag(A + gamma I)^(-1/2)
  fullA_chol          A + gamma I = L L^T, W~ = W L^-T, back W~ L^T
  fullA_sym           T = (A + gamma I)^(-1/2), back (A + gamma I)^(1/2)
  fullA_sym:<beta>    the same with tau = beta tr(A)/d_in instead of gamma
  blockA_<b>          fullA_chol on each b x b diagonal block (gamma of A)
  lowrankA_<r>        top-r eigenpairs (U, l) of A, s2 = max((tr A - sum l)/
                      (d_in - r), gamma), c = sqrt(s2/l) - 1,
                      W~ = W + ((W U) diag(c)) U^T, back with sqrt(l/s2) - 1
  lowrankA_<r>:<beta> damped: s2 = max((tr A - sum l)/(d_in - r),
                      beta tr A/d_in), l' = max(l, s2) (the run-time default)
  nystromA_<r>[:<beta>]  as lowrankA with (U, l) from a Nystrom sketch of X:
                      k = r + 16 columns, test matrix from seed 20260101,
                      Y accumulated in float32 over the rows of X
  outG_chol           G + gamma_G I = L_G L_G^T, W~ = L_G^-1 W, back L_G W~
  kfac_chol           outG_chol and fullA_chol together
Default: euclid, euclid_block512; with A (or X): diagA, fullA_chol,
fullA_sym, fullA_sym:0.3, blockA_64, lowrankA_32, lowrankA_32:1.0; with X:
nystromA_32, nystromA_32:1.0; with G: outG_chol; with A and G: kfac_chol.

Worker mode (--grad-workers) simulates the two-phase allreduce of
DESIGN.md §3 for each method (default: euclid, plus lowrankA_32:1.0 with
A or X), with and without error feedback: per step every worker transforms
its gradient (+ its residual), quantizes R chunks with their own scales, the
chunk owners accumulate in FP32 and re-quantize, every worker dequantizes,
divides by R and back-transforms. Reported per step: rel_l2 and cos of the
average vs the FP32 mean, and drift = |sum_t ĝ_t - sum_t g_t|/|sum_t g_t|;
plus bytes sent per worker per step, in the format (codes and scales; the
JSON key is "fp8" for any format) vs an FP32 ring allreduce. "ef" of
euclid is the Euclidean baseline with error feedback.
JSON: {"mode": "workers", "workers", "steps", "methods": {name: {"ef": [...],
"no_ef": [...], "bytes_per_step": {...}}}}.

Errors (bad files, shapes, NaN/Inf, non-PSD A or G, unknown flags or
methods, missing inputs) print one line "gift-fidelity: error: ..." on
stderr and exit with status 2.
)";

const std::set<std::string>& ValueFlags() {
  static const auto* flags =
      new std::set<std::string>{"--grad", "--grad-workers", "--a",     "--g",
                                "--acts", "--methods",      "--format"};
  return *flags;
}

absl::Status SetValue(CliOptions& o, const std::string& flag,
                      const std::string& value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
  }
  if (flag == "--grad") o.paths.grad = value;
  if (flag == "--grad-workers") o.paths.grad_workers = value;
  if (flag == "--a") o.paths.a = value;
  if (flag == "--g") o.paths.g = value;
  if (flag == "--acts") o.paths.acts = value;
  if (flag == "--methods") o.methods = value;
  if (flag == "--format") {
    ASSIGN_OR_RETURN(o.format, kernels::ParseWireFormat(value));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MethodSpec>> ChooseMethods(const CliOptions& o) {
  const bool has_a = !o.paths.a.empty() || !o.paths.acts.empty();
  const bool has_x = !o.paths.acts.empty(), has_g = !o.paths.g.empty();
  std::string list = o.methods;
  if (list.empty()) {
    list = absl::StrJoin(o.paths.grad_workers.empty()
                             ? DefaultMethods(has_a, has_x, has_g)
                             : DefaultWorkerMethods(has_a),
                         ",");
  }
  ASSIGN_OR_RETURN(std::vector<MethodSpec> methods, ParseMethodList(list));
  for (const MethodSpec& m : methods) {
    RETURN_IF_ERROR(CheckInputs(m, has_a, has_x, has_g));
  }
  return methods;
}

WireSpec Spec(const CliOptions& o, const MethodSpec& m) {
  return WireSpec(o.format, m.block_size);
}

absl::StatusOr<std::string> RunOneStep(const CliOptions& o, Inputs& in,
                                       const std::vector<MethodSpec>& methods,
                                       Geometry& geo) {
  const RowMatrixd w = Eigen::Map<const RowMatrixf>(
                           in.grads.data(), in.shape.d_out, in.shape.d_in)
                           .cast<double>();
  OneStepReport r{
      kernels::WireFormatName(o.format), in.shape.d_out, in.shape.d_in, {}};
  for (const MethodSpec& m : methods) {
    ASSIGN_OR_RETURN(std::unique_ptr<Transform> t, MakeTransform(m, geo));
    ASSIGN_OR_RETURN(ErrorMetrics e, OneStepRoundTrip(w, *t, Spec(o, m)));
    r.methods.push_back({m.name, e});
  }
  return o.json ? OneStepJson(r).dump(2) + "\n" : OneStepTable(r);
}

absl::StatusOr<std::string> RunWorkers(const CliOptions& o, Inputs& in,
                                       const std::vector<MethodSpec>& methods,
                                       Geometry& geo) {
  WorkerReport r{kernels::WireFormatName(o.format), in.shape, {}};
  for (const MethodSpec& m : methods) {
    ASSIGN_OR_RETURN(std::unique_ptr<Transform> t, MakeTransform(m, geo));
    WorkerMethodResult res{m.name, {}, {}, {}};
    ASSIGN_OR_RETURN(res.ef, SimulateWorkers(in.grads.data(), in.shape, *t,
                                             Spec(o, m), true));
    ASSIGN_OR_RETURN(res.no_ef, SimulateWorkers(in.grads.data(), in.shape, *t,
                                                Spec(o, m), false));
    res.bytes = WireBytesPerWorker(in.shape.d_out * in.shape.d_in,
                                   in.shape.workers, Spec(o, m));
    r.methods.push_back(std::move(res));
  }
  return o.json ? WorkerJson(r).dump(2) + "\n" : WorkerTable(r);
}

absl::StatusOr<std::string> Run(const CliOptions& o) {
  ASSIGN_OR_RETURN(std::vector<MethodSpec> methods, ChooseMethods(o));
  ASSIGN_OR_RETURN(Inputs in, LoadInputs(o.paths));
  Geometry geo(std::move(in.a), std::move(in.g), std::move(in.acts));
  if (o.paths.grad_workers.empty()) return RunOneStep(o, in, methods, geo);
  return RunWorkers(o, in, methods, geo);
}

}  // namespace

std::string UsageText() { return kUsage; }

absl::StatusOr<CliOptions> ParseCli(const std::vector<std::string>& args) {
  CliOptions o;
  std::set<std::string> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const size_t eq = flag.find('=');
    const bool inline_value =
        flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      continue;
    }
    if (!seen.insert(flag).second) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " given twice"));
    }
    if (flag == "--json" && !inline_value) {
      o.json = true;
    } else if (ValueFlags().count(flag) > 0) {
      if (!inline_value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat(flag, " needs a value"));
        }
        value = args[++i];
      }
      RETURN_IF_ERROR(SetValue(o, flag, value));
    } else if (flag.rfind("-", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", args[i], "' (see --help)"));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", args[i], "' (see --help)"));
    }
  }
  if (o.help) return o;
  if (o.paths.grad.empty() == o.paths.grad_workers.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of --grad and --grad-workers (see --help)");
  }
  return o;
}

int RunFidelityCli(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<std::string> text = [&]() -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(CliOptions o, ParseCli(args));
    if (o.help) return UsageText();
    return Run(o);
  }();
  if (!text.ok()) {
    std::string msg(text.status().message());
    absl::StrReplaceAll({{"\n", " "}}, &msg);
    err << "gift-fidelity: error: " << msg << "\n";
    return 2;
  }
  out << *text;
  out.flush();
  return 0;
}

}  // namespace gift::fidelity
