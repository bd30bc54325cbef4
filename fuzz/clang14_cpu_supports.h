// Force-included into kernels/fp8.cc in the fuzz build only (fuzz/
// CMakeLists.txt). clang 14 refuses __builtin_cpu_supports("f16c") ("invalid
// cpu feature string for builtin", kernels/fp8.cc:98), so this replaces the
// builtin with the same CPUID checks for the three features fp8.cc asks
// about. GCC builds never see it. Remove once fp8.cc builds with clang 14.
#ifndef GIFT_FUZZ_CLANG14_CPU_SUPPORTS_H_
#define GIFT_FUZZ_CLANG14_CPU_SUPPORTS_H_

#include <cpuid.h>

#include <cstring>

namespace gift_fuzz {

// CPUID leaf 1 (ecx: FMA, F16C, OSXSAVE) and leaf 7 (ebx: AVX2), with the
// OS saving the AVX state (XGETBV).
inline bool CpuSupports(const char* feature) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool os_avx = (c & bit_OSXSAVE) != 0 && (c & bit_AVX) != 0 && [] {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6) == 0x6;
  }();
  if (std::strcmp(feature, "fma") == 0) return os_avx && (c & bit_FMA);
  if (std::strcmp(feature, "f16c") == 0) return os_avx && (c & bit_F16C);
  if (std::strcmp(feature, "avx2") == 0) {
    unsigned a7, b7, c7, d7;
    return os_avx && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) &&
           (b7 & bit_AVX2);
  }
  return false;
}

}  // namespace gift_fuzz

#define __builtin_cpu_supports(feature) ::gift_fuzz::CpuSupports(feature)

#endif  // GIFT_FUZZ_CLANG14_CPU_SUPPORTS_H_
