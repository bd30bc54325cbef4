// The x86-64 micro-architecture level this build's CPU code was compiled
// for (CMake GIFT_X86_64_LEVEL, default x86-64-v3: AVX2 + FMA) against the
// CPU it runs on. A program built for x86-64-v3 dies of SIGILL on an older
// CPU somewhere in the first Eigen GEMM; the entry points (giftd, giftctl,
// gift-fidelity, the gift Python module) call CheckCpuBaseline() first and
// stop with a clear error instead.
#ifndef GIFT_KERNELS_CPU_BASELINE_H_
#define GIFT_KERNELS_CPU_BASELINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gift::kernels {

// The level the build targets ("" = the compiler's default).
const char* CpuBaselineLevel();

// The CPU features the build's level needs that `has` says are missing
// (`has` is the CPU's test, __builtin_cpu_supports by default).
std::vector<std::string> MissingCpuFeatures(bool (*has)(const char*) = nullptr);

// OK, or FAILED_PRECONDITION naming the missing features and the rebuild.
absl::Status CheckCpuBaseline();

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_CPU_BASELINE_H_
