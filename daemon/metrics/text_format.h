// Pieces of the Prometheus text exposition format 0.0.4 that the registry
// assembles into a scrape body: name validation, escaping, value formatting
// and one sample line. Kept apart from registry.cc so the format rules (what
// promtool accepts) live in one small, separately tested place.
//
//   std::string out;
//   AppendHeader(&out, "gift_steps_total", "Steps seen.", "counter");
//   AppendSample(&out, "gift_steps_total", {"rank"}, {"0"}, FormatValue(3.0));
//   // # HELP gift_steps_total Steps seen.
//   // # TYPE gift_steps_total counter
//   // gift_steps_total{rank="0"} 3
//
// Thread safety: all functions are pure and thread-safe.
#ifndef GIFT_DAEMON_METRICS_TEXT_FORMAT_H_
#define GIFT_DAEMON_METRICS_TEXT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gift::metrics {

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved by Prometheus).
bool IsValidLabelName(std::string_view name);

// HELP text: backslash and newline escaped.
std::string EscapeHelp(std::string_view help);
// Label values: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view value);

// Finite values as the shortest digits that round-trip, positional when
// 1e-7 < |v| < 1e21 ("3", "-7", "0.1", "0.0005", "1000000"), else with an
// exponent ("1e-09", "1e+21"); non-finite as "+Inf", "-Inf", "NaN" (the
// spellings Prometheus parses).
std::string FormatValue(double v);
std::string FormatValue(uint64_t v);

// "# HELP name help\n# TYPE name type\n".
void AppendHeader(std::string* out, std::string_view name,
                  std::string_view help, std::string_view type);

// `name{n1="v1",...[,le="le"]} value\n`; the braces are omitted when there
// are no labels. `le` (histogram buckets) is appended last when non-empty.
// REQUIRES: names.size() == values.size().
void AppendSample(std::string* out, std::string_view name,
                  const std::vector<std::string>& names,
                  const std::vector<std::string>& values,
                  std::string_view value, std::string_view le = {});

}  // namespace gift::metrics

#endif  // GIFT_DAEMON_METRICS_TEXT_FORMAT_H_
