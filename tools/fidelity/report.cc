#include "tools/fidelity/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gift::fidelity {
namespace {

nlohmann::ordered_json StepsJson(const std::vector<WorkerStepMetrics>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const WorkerStepMetrics& s : v) {
    a.push_back({{"step", s.step},
                 {"rel_l2", s.rel_l2},
                 {"cos", s.cos},
                 {"drift", s.drift}});
  }
  return a;
}

bool Is4Bit(const std::string& format) {
  return format == "nvfp4" || format == "mxfp4";
}

// "FP8 e4m3" / "4-bit nvfp4".
std::string Title(const std::string& format) {
  return absl::StrCat(Is4Bit(format) ? "4-bit " : "FP8 ", format);
}

size_t NameWidth(const std::vector<std::string>& names) {
  size_t w = 6;
  for (const std::string& n : names) w = std::max(w, n.size());
  return w;
}

}  // namespace

nlohmann::ordered_json OneStepJson(const OneStepReport& r) {
  nlohmann::ordered_json methods = nlohmann::ordered_json::object();
  for (const MethodResult& m : r.methods) {
    methods[m.name] = {{"rel_l2", m.metrics.rel_l2},
                       {"cos", m.metrics.cos},
                       {"max_err", m.metrics.max_err},
                       {"mse", m.metrics.mse}};
  }
  return {{"format", r.format},
          {"d_out", r.d_out},
          {"d_in", r.d_in},
          {"methods", std::move(methods)}};
}

std::string OneStepTable(const OneStepReport& r) {
  std::vector<std::string> names;
  for (const MethodResult& m : r.methods) names.push_back(m.name);
  const int w = static_cast<int>(NameWidth(names));
  const ErrorMetrics* euclid = nullptr;
  for (const MethodResult& m : r.methods) {
    if (m.name == "euclid") euclid = &m.metrics;
  }
  std::string out = absl::StrFormat(
      "%s one-step round trip, W %d x %d\n%-*s  %10s  %10s  %10s  %10s  "
      "%9s\n",
      Title(r.format), r.d_out, r.d_in, w, "method", "rel_l2", "cos", "max_err",
      "mse", "vs_euclid");
  for (const MethodResult& m : r.methods) {
    const std::string ratio =
        euclid != nullptr && euclid->rel_l2 > 0
            ? absl::StrFormat("%9.3f", m.metrics.rel_l2 / euclid->rel_l2)
            : absl::StrFormat("%9s", "-");
    absl::StrAppendFormat(&out, "%-*s  %10.4e  %10.6f  %10.4e  %10.4e  %s\n", w,
                          m.name, m.metrics.rel_l2, m.metrics.cos,
                          m.metrics.max_err, m.metrics.mse, ratio);
  }
  return out;
}

nlohmann::ordered_json WorkerJson(const WorkerReport& r) {
  nlohmann::ordered_json methods = nlohmann::ordered_json::object();
  for (const WorkerMethodResult& m : r.methods) {
    methods[m.name] = {{"ef", StepsJson(m.ef)},
                       {"no_ef", StepsJson(m.no_ef)},
                       {"bytes_per_step",
                        {{"fp8", m.bytes.fp8},
                         {"fp32", m.bytes.fp32},
                         {"fp8_over_fp32", m.bytes.fp8 / m.bytes.fp32}}}};
  }
  return {{"mode", "workers"},
          {"format", r.format},
          {"workers", r.shape.workers},
          {"steps", r.shape.steps},
          {"d_out", r.shape.d_out},
          {"d_in", r.shape.d_in},
          {"methods", std::move(methods)}};
}

std::string WorkerTable(const WorkerReport& r) {
  std::vector<std::string> names;
  for (const WorkerMethodResult& m : r.methods) names.push_back(m.name);
  const int w = static_cast<int>(NameWidth(names));
  std::string out = absl::StrFormat(
      "%s quantized allreduce, %d workers, %d steps, W %d x %d\n"
      "%-*s  %4s  %10s  %10s  %10s  %10s  %10s  %10s\n",
      Title(r.format), r.shape.workers, r.shape.steps, r.shape.d_out,
      r.shape.d_in, w, "method", "step", "ef_rel_l2", "ef_cos", "ef_drift",
      "rel_l2", "cos", "drift");
  for (const WorkerMethodResult& m : r.methods) {
    for (size_t i = 0; i < m.ef.size() && i < m.no_ef.size(); ++i) {
      absl::StrAppendFormat(
          &out, "%-*s  %4d  %10.4e  %10.6f  %10.4e  %10.4e  %10.6f  %10.4e\n",
          w, m.name, m.ef[i].step, m.ef[i].rel_l2, m.ef[i].cos, m.ef[i].drift,
          m.no_ef[i].rel_l2, m.no_ef[i].cos, m.no_ef[i].drift);
    }
  }
  for (const WorkerMethodResult& m : r.methods) {
    absl::StrAppendFormat(
        &out, "%-*s  bytes per worker per step: %s %.0f, fp32 %.0f (%.2f%%)\n",
        w, m.name, Is4Bit(r.format) ? r.format : "fp8", m.bytes.fp8,
        m.bytes.fp32, 100 * m.bytes.fp8 / m.bytes.fp32);
  }
  return out;
}

}  // namespace gift::fidelity
