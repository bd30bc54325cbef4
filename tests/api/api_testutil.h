// Helpers of the public API's tests (tests/api/): ranks as threads of one
// process (each with its own communicator over a shared store directory)
// and deterministic gradients; the temporary directories (TempDir) and
// RelL2 are the shared test helpers' (common/testing.h). Uses only the
// public headers, the standard library and those test helpers (not part of
// libgift), as a consumer of libgift would.
//
// Thread safety: RunRanks runs fn on one thread per rank; gtest assertions
// are thread-safe.
#ifndef GIFT_TESTS_API_API_TESTUTIL_H_
#define GIFT_TESTS_API_API_TESTUTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/testing.h"

namespace gift::testing {

// Runs fn(rank) on world_size threads and joins them.
inline void RunRanks(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

// A deterministic gradient of rank `rank`: values in about [-1, 1] with a
// few larger ones (so that the FP8 scale is set by an outlier).
inline std::vector<float> Gradient(int rank, size_t n, uint32_t seed = 1) {
  std::vector<float> g(n);
  uint32_t x = seed * 2654435761u + static_cast<uint32_t>(rank) * 40503u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float u = static_cast<float>(x >> 8) / 16777216.0f;  // [0, 1)
    g[i] = 2 * u - 1;
    if (i % 97 == 5) g[i] *= 8;
  }
  return g;
}

}  // namespace gift::testing

#endif  // GIFT_TESTS_API_API_TESTUTIL_H_
