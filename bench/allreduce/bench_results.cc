#include "bench/allreduce/bench_results.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

const ModeResult* Find(const std::vector<ModeResult>& rows, int64_t size,
                       absl::string_view mode) {
  for (const ModeResult& r : rows) {
    if (r.size_mib == size && r.mode == mode) return &r;
  }
  return nullptr;
}

std::string Ratio(double num, const ModeResult* den, double ModeResult::*f) {
  if (den == nullptr || !(den->*f > 0)) return "-";
  return absl::StrFormat("%.3f", num / (den->*f));
}

}  // namespace

std::string ToLine(const ModeResult& r) {
  return absl::StrFormat("%d\t%s\t%d\t%.1f\t%.4f\t%.4f\t%.6g", r.size_mib,
                         r.mode, r.steps, r.bytes_per_rank, r.median_ms,
                         r.p90_ms, r.rel_l2_vs_fp32);
}

absl::StatusOr<ModeResult> FromLine(absl::string_view line) {
  std::vector<std::string> f = absl::StrSplit(line, '\t');
  ModeResult r;
  if (f.size() != 7 || !absl::SimpleAtoi(f[0], &r.size_mib) ||
      !absl::SimpleAtoi(f[2], &r.steps) ||
      !absl::SimpleAtod(f[3], &r.bytes_per_rank) ||
      !absl::SimpleAtod(f[4], &r.median_ms) ||
      !absl::SimpleAtod(f[5], &r.p90_ms) ||
      !absl::SimpleAtod(f[6], &r.rel_l2_vs_fp32)) {
    return absl::InvalidArgumentError(absl::StrCat("bad result line: ", line));
  }
  r.mode = f[1];
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double P90(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(0.9 * double(v.size())));
  return v[std::max<size_t>(k, 1) - 1];
}

std::string FormatTable(const std::vector<ModeResult>& rows) {
  std::string out = absl::StrFormat(
      "%8s %-10s %5s %14s %9s %11s %11s %10s %9s %11s\n", "size_MiB", "mode",
      "steps", "bytes/rank", "vs_fp32", "median_ms", "p90_ms", "t/gloo32",
      "t/fp32", "relL2/fp32");
  for (const ModeResult& r : rows) {
    const ModeResult* fp32 = Find(rows, r.size_mib, "fp32");
    const ModeResult* gloo = Find(rows, r.size_mib, "gloo-fp32");
    const std::string rel =
        r.rel_l2_vs_fp32 < 0 ? "-" : absl::StrFormat("%.2e", r.rel_l2_vs_fp32);
    absl::StrAppendFormat(
        &out, "%8d %-10s %5d %14.0f %9s %11.2f %11.2f %10s %9s %11s\n",
        r.size_mib, r.mode, r.steps, r.bytes_per_rank,
        Ratio(r.bytes_per_rank, fp32, &ModeResult::bytes_per_rank), r.median_ms,
        r.p90_ms, Ratio(r.median_ms, gloo, &ModeResult::median_ms),
        Ratio(r.median_ms, fp32, &ModeResult::median_ms), rel);
  }
  return out;
}

absl::Status WriteJson(const std::string& path, const std::string& config_json,
                       const std::vector<ModeResult>& rows) {
  nlohmann::json doc;
  doc["config"] = nlohmann::json::parse(config_json, nullptr, false);
  if (doc["config"].is_discarded()) {
    return absl::InvalidArgumentError("config is not JSON");
  }
  doc["results"] = nlohmann::json::array();
  for (const ModeResult& r : rows) {
    nlohmann::json j = {{"size_mib", r.size_mib},
                        {"mode", r.mode},
                        {"steps", r.steps},
                        {"bytes_per_rank_per_step", r.bytes_per_rank},
                        {"median_ms", r.median_ms},
                        {"p90_ms", r.p90_ms}};
    if (r.rel_l2_vs_fp32 >= 0) j["rel_l2_vs_fp32"] = r.rel_l2_vs_fp32;
    const ModeResult* fp32 = Find(rows, r.size_mib, "fp32");
    const ModeResult* gloo = Find(rows, r.size_mib, "gloo-fp32");
    if (fp32 != nullptr && fp32->bytes_per_rank > 0) {
      j["bytes_vs_fp32"] = r.bytes_per_rank / fp32->bytes_per_rank;
    }
    if (fp32 != nullptr && fp32->median_ms > 0) {
      j["time_vs_fp32"] = r.median_ms / fp32->median_ms;
    }
    if (gloo != nullptr && gloo->median_ms > 0) {
      j["time_vs_gloo_fp32"] = r.median_ms / gloo->median_ms;
    }
    doc["results"].push_back(std::move(j));
  }
  std::ofstream f(path);
  f << doc.dump(2) << "\n";
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace gift::bench
