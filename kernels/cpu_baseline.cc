// Compiled for the portable x86-64 baseline whatever GIFT_X86_64_LEVEL is
// (kernels/CMakeLists.txt), so that the check itself runs on any CPU.
#include "kernels/cpu_baseline.h"

#include <cpuid.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef GIFT_X86_64_LEVEL
#define GIFT_X86_64_LEVEL ""
#endif

namespace gift::kernels {
namespace {

// What each level adds that the compiler may emit in ordinary code (the
// vector and bit-manipulation sets; XSAVE, CMPXCHG16B and the like are
// below every CPU this project meets). Cumulative: v3 includes v2.
constexpr const char* kV2[] = {"popcnt", "sse3", "ssse3", "sse4.1", "sse4.2"};
constexpr const char* kV3[] = {"avx", "avx2", "bmi", "bmi2", "f16c", "fma"};
constexpr const char* kV4[] = {"avx512f", "avx512bw", "avx512cd", "avx512dq",
                               "avx512vl"};

bool BuiltinHas(const char* feature) {
#if defined(__x86_64__)
  // __builtin_cpu_supports needs a literal: one case per feature above.
#define GIFT_CPU_CASE(name) \
  if (std::strcmp(feature, name) == 0) return __builtin_cpu_supports(name)
  GIFT_CPU_CASE("popcnt");
  GIFT_CPU_CASE("sse3");
  GIFT_CPU_CASE("ssse3");
  GIFT_CPU_CASE("sse4.1");
  GIFT_CPU_CASE("sse4.2");
  GIFT_CPU_CASE("avx");
  GIFT_CPU_CASE("avx2");
  GIFT_CPU_CASE("bmi");
  GIFT_CPU_CASE("bmi2");
  GIFT_CPU_CASE("fma");
  GIFT_CPU_CASE("avx512f");
  GIFT_CPU_CASE("avx512bw");
  GIFT_CPU_CASE("avx512cd");
  GIFT_CPU_CASE("avx512dq");
  GIFT_CPU_CASE("avx512vl");
#undef GIFT_CPU_CASE
  // f16c: clang 14 rejects the literal; CPUID leaf 1, ECX bit 29.
  if (std::strcmp(feature, "f16c") == 0) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }
#else
  (void)feature;
#endif
  return true;
}

}  // namespace

const char* CpuBaselineLevel() { return GIFT_X86_64_LEVEL; }

std::vector<std::string> MissingCpuFeatures(bool (*has)(const char*)) {
  if (has == nullptr) has = BuiltinHas;
  const std::string level = GIFT_X86_64_LEVEL;
  std::vector<std::string> missing;
  auto need = [&](const auto& features) {
    for (const char* f : features) {
      if (!has(f)) missing.emplace_back(f);
    }
  };
  if (level == "x86-64-v2" || level == "x86-64-v3" || level == "x86-64-v4") {
    need(kV2);
  }
  if (level == "x86-64-v3" || level == "x86-64-v4") need(kV3);
  if (level == "x86-64-v4") need(kV4);
  return missing;
}

absl::Status CheckCpuBaseline() {
  const std::vector<std::string> missing = MissingCpuFeatures();
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this build of gift is compiled for ", GIFT_X86_64_LEVEL,
      " and this CPU lacks ", absl::StrJoin(missing, ", "),
      "; rebuild with cmake -DGIFT_X86_64_LEVEL=x86-64 (the portable "
      "baseline, slower GEMMs) or on a newer CPU"));
}

}  // namespace gift::kernels
