#include "daemon/metrics/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace gift::metrics {
namespace {

bool IsAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Escapes backslash and newline, and the double quote when `quote` is set.
std::string Escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || IsDigit(name[0])) return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != '_' && c != ':') return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || IsDigit(name[0]) || name.substr(0, 2) == "__") {
    return false;
  }
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != '_') return false;
  }
  return true;
}

std::string EscapeHelp(std::string_view help) { return Escape(help, false); }

std::string EscapeLabelValue(std::string_view value) {
  return Escape(value, true);
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // also -0
  // Shortest round-trip digits, laid out as ECMAScript's Number#toString
  // does: positional for 1e-7 < |v| < 1e21, else exponent. So integers
  // print plainly ("1000000") and bucket bounds read as written
  // (le="0.0005", as the Go client prints them, not "5e-04").
  char buf[64];
  char* end =
      std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific)
          .ptr;
  const char* e = std::find(buf, end, 'e') + 1;  // "e+06" or "e-07"
  int exponent = 0;
  std::from_chars(e + (*e == '+' ? 1 : 0), end, exponent);
  if (exponent > -7 && exponent < 21) {
    end =
        std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed).ptr;
  }
  return std::string(buf, end);
}

std::string FormatValue(uint64_t v) { return std::to_string(v); }

void AppendHeader(std::string* out, std::string_view name,
                  std::string_view help, std::string_view type) {
  out->append("# HELP ").append(name).append(" ");
  out->append(EscapeHelp(help)).append("\n");
  out->append("# TYPE ").append(name).append(" ");
  out->append(type).append("\n");
}

void AppendSample(std::string* out, std::string_view name,
                  const std::vector<std::string>& names,
                  const std::vector<std::string>& values,
                  std::string_view value, std::string_view le) {
  out->append(name);
  if (!names.empty() || !le.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out->push_back(',');
      out->append(names[i]).append("=\"");
      out->append(EscapeLabelValue(values[i])).append("\"");
    }
    if (!le.empty()) {
      if (!names.empty()) out->push_back(',');
      out->append("le=\"").append(le).append("\"");
    }
    out->push_back('}');
  }
  out->append(" ").append(value).append("\n");
}

}  // namespace gift::metrics
