// Reading fields of giftctl's --json output (protobuf messages printed as
// JSON) without depending on the printer's choices: a field is looked up by
// its proto name (snake_case) and by its lowerCamelCase JSON name; a field
// left out (proto3 omits default values) reads as the default; 64-bit
// integers may come as strings, and NaN / Infinity as "NaN" / "Infinity".
//
//   EXPECT_EQ(Int(status, "ranks_registered"), 4);
//   for (const json& l : Field(layers, "layers")) Str(l, "name");
//
// Thread safety: pure functions.
#ifndef GIFT_TESTS_DAEMON_JSON_FIELDS_H_
#define GIFT_TESTS_DAEMON_JSON_FIELDS_H_

#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "nlohmann/json.hpp"

namespace gift::testing_daemon {

inline std::string LowerCamel(const std::string& snake) {
  std::string out;
  bool up = false;
  for (char c : snake) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(c)) : c;
    up = false;
  }
  return out;
}

// The field, or null when absent.
inline const nlohmann::json& Field(const nlohmann::json& j,
                                   const std::string& name) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!j.is_object()) return *kNull;
  auto it = j.find(name);
  if (it == j.end()) it = j.find(LowerCamel(name));
  return it == j.end() ? *kNull : *it;
}

inline double Num(const nlohmann::json& j, const std::string& name) {
  const nlohmann::json& f = Field(j, name);
  if (f.is_number()) return f.get<double>();
  if (f.is_string()) {
    const std::string s = f.get<std::string>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    try {
      return std::stod(s);
    } catch (...) {
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  return 0;
}

inline int64_t Int(const nlohmann::json& j, const std::string& name) {
  const nlohmann::json& f = Field(j, name);
  if (f.is_number()) return f.get<int64_t>();
  if (f.is_string()) {
    try {
      return std::stoll(f.get<std::string>());
    } catch (...) {
      return INT64_MIN;
    }
  }
  return 0;
}

inline bool Bool(const nlohmann::json& j, const std::string& name) {
  const nlohmann::json& f = Field(j, name);
  return f.is_boolean() && f.get<bool>();
}

inline std::string Str(const nlohmann::json& j, const std::string& name) {
  const nlohmann::json& f = Field(j, name);
  return f.is_string() ? f.get<std::string>() : "";
}

}  // namespace gift::testing_daemon

#endif  // GIFT_TESTS_DAEMON_JSON_FIELDS_H_
