#include "tools/fidelity/method.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace gift::fidelity {
namespace {

absl::Status Unknown(absl::string_view name, absl::string_view why = "") {
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown method '", name, "'", why.empty() ? "" : " (", why,
      why.empty() ? "" : ")",
      "; known: euclid, euclid_block<B>, diagA, fullA_chol, "
      "fullA_sym[:<beta>], "
      "blockA_<b>, lowrankA_<r>[:<beta>], nystromA_<r>[:<beta>], outG_chol, "
      "kfac_chol"));
}

// A positive decimal integer without sign or leading zeros.
std::optional<int64_t> ParsePositiveInt(absl::string_view s) {
  if (s.empty() || s.size() > 9 || s[0] == '0') return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// A positive finite decimal such as "1", "1.0", "0.3" (no sign, exponent).
std::optional<double> ParseBeta(absl::string_view s) {
  if (s.empty()) return std::nullopt;
  int dots = 0;
  for (char c : s) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return std::nullopt;
    }
  }
  if (dots > 1 || s == ".") return std::nullopt;
  double v;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v <= 0) {
    return std::nullopt;
  }
  return v;
}

// `name` = prefix + integer; returns the integer.
std::optional<int64_t> Suffix(absl::string_view name,
                              absl::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  return ParsePositiveInt(name.substr(prefix.size()));
}

}  // namespace

bool MethodSpec::NeedsA() const {
  switch (kind) {
    case MethodKind::kDiagA:
    case MethodKind::kFullACholesky:
    case MethodKind::kFullASymmetric:
    case MethodKind::kBlockA:
    case MethodKind::kLowRankA:
    case MethodKind::kKfacCholesky:
      return true;
    default:
      return false;
  }
}

bool MethodSpec::NeedsX() const { return kind == MethodKind::kNystromA; }

bool MethodSpec::NeedsG() const {
  return kind == MethodKind::kOutGCholesky || kind == MethodKind::kKfacCholesky;
}

absl::StatusOr<MethodSpec> ParseMethod(absl::string_view name) {
  MethodSpec m;
  m.name = std::string(name);
  absl::string_view base = name;
  const size_t colon = name.find(':');
  if (colon != absl::string_view::npos) {
    base = name.substr(0, colon);
    m.beta = ParseBeta(name.substr(colon + 1));
    if (!m.beta) return Unknown(name, "beta must be a positive decimal");
  }
  if (base == "euclid") {
    m.kind = MethodKind::kEuclid;
  } else if (auto b = Suffix(base, "euclid_block")) {
    m.kind = MethodKind::kEuclid;
    m.block_size = *b;
  } else if (base == "diagA") {
    m.kind = MethodKind::kDiagA;
  } else if (base == "fullA_chol") {
    m.kind = MethodKind::kFullACholesky;
  } else if (base == "fullA_sym") {
    m.kind = MethodKind::kFullASymmetric;
  } else if (auto b = Suffix(base, "blockA_")) {
    m.kind = MethodKind::kBlockA;
    m.rank = *b;
  } else if (auto r = Suffix(base, "lowrankA_")) {
    m.kind = MethodKind::kLowRankA;
    m.rank = *r;
  } else if (auto r = Suffix(base, "nystromA_")) {
    m.kind = MethodKind::kNystromA;
    m.rank = *r;
  } else if (base == "outG_chol") {
    m.kind = MethodKind::kOutGCholesky;
  } else if (base == "kfac_chol") {
    m.kind = MethodKind::kKfacCholesky;
  } else {
    return Unknown(name);
  }
  const bool takes_beta = m.kind == MethodKind::kFullASymmetric ||
                          m.kind == MethodKind::kLowRankA ||
                          m.kind == MethodKind::kNystromA;
  if (m.beta && !takes_beta) {
    return Unknown(name, absl::StrCat("'", base, "' takes no :<beta>"));
  }
  return m;
}

absl::StatusOr<std::vector<MethodSpec>> ParseMethodList(
    absl::string_view list) {
  std::vector<MethodSpec> out;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty method name in --methods '", list, "'"));
    }
    ASSIGN_OR_RETURN(MethodSpec m, ParseMethod(item));
    if (!seen.insert(m.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("method '", m.name, "' given twice"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string> DefaultMethods(bool has_a, bool has_x, bool has_g) {
  std::vector<std::string> m = {"euclid", "euclid_block512"};
  if (has_a) {
    for (const char* name :
         {"diagA", "fullA_chol", "fullA_sym", "fullA_sym:0.3", "blockA_64",
          "lowrankA_32", "lowrankA_32:1.0"}) {
      m.push_back(name);
    }
  }
  if (has_x) {
    m.push_back("nystromA_32");
    m.push_back("nystromA_32:1.0");
  }
  if (has_g) m.push_back("outG_chol");
  if (has_a && has_g) m.push_back("kfac_chol");
  return m;
}

std::vector<std::string> DefaultWorkerMethods(bool has_a) {
  if (has_a) return {"euclid", "lowrankA_32:1.0"};
  return {"euclid"};
}

absl::Status CheckInputs(const MethodSpec& m, bool has_a, bool has_x,
                         bool has_g) {
  if (m.NeedsA() && !has_a) {
    return absl::InvalidArgumentError(
        absl::StrCat("method '", m.name,
                     "' needs the activation moment: give --a or --acts"));
  }
  if (m.NeedsX() && !has_x) {
    return absl::InvalidArgumentError(absl::StrCat(
        "method '", m.name, "' needs the activations: give --acts"));
  }
  if (m.NeedsG() && !has_g) {
    return absl::InvalidArgumentError(absl::StrCat(
        "method '", m.name, "' needs the output moment: give --g"));
  }
  return absl::OkStatus();
}

}  // namespace gift::fidelity
