// gift-fidelity's results as plain data, and their two renderings: the JSON
// document on stdout (--json) and an aligned human table.
//
//   OneStepReport r{"e4m3", 256, 128, {{"euclid", metrics}}};
//   std::cout << OneStepJson(r).dump(2) << "\n";
//
// Thread safety: pure functions.
#ifndef GIFT_TOOLS_FIDELITY_REPORT_H_
#define GIFT_TOOLS_FIDELITY_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/fidelity/metrics.h"
#include "tools/fidelity/workers.h"

namespace gift::fidelity {

struct MethodResult {
  std::string name;
  ErrorMetrics metrics;
};

struct OneStepReport {
  std::string format;
  int64_t d_out = 0;
  int64_t d_in = 0;
  std::vector<MethodResult> methods;  // in the order requested
};

struct WorkerMethodResult {
  std::string name;
  std::vector<WorkerStepMetrics> ef;
  std::vector<WorkerStepMetrics> no_ef;
  WireBytes bytes;
};

struct WorkerReport {
  std::string format;
  WorkerShape shape;
  std::vector<WorkerMethodResult> methods;
};

// {"format", "d_out", "d_in", "methods": {name: {rel_l2, cos, max_err, mse}}}
nlohmann::ordered_json OneStepJson(const OneStepReport& r);
std::string OneStepTable(const OneStepReport& r);

// {"mode": "workers", "format", "workers", "steps", "d_out", "d_in",
//  "methods": {name: {"ef": [{step, rel_l2, cos, drift}...], "no_ef": [...],
//                     "bytes_per_step": {"fp8", "fp32", "fp8_over_fp32"}}}}
nlohmann::ordered_json WorkerJson(const WorkerReport& r);
std::string WorkerTable(const WorkerReport& r);

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_REPORT_H_
