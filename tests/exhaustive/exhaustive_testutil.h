// The harness of the exhaustive codec tests (fp8_exhaustive_test.cc,
// fp4_exhaustive_test.cc): every one of the 2^32 float bit patterns, split
// over all hardware threads in chunks of kChunk, with the failures counted
// and the first kMaxReports reported.
//
//   ForAllFloats([](uint64_t begin, uint64_t end, Failures* fail) {
//     for (uint64_t u = begin; u < end; ++u) { ... fail->Add(msg); }
//   });
//
// Thread safety: the check runs on several threads at once, each over its
// own range; Failures::Add may be called from all of them.
#ifndef GIFT_TESTS_EXHAUSTIVE_EXHAUSTIVE_TESTUTIL_H_
#define GIFT_TESTS_EXHAUSTIVE_EXHAUSTIVE_TESTUTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gift::exhaustive {

inline constexpr int kMaxReports = 8;
// Ranges handed to the check are multiples of kChunk (but the last).
inline constexpr uint64_t kChunk = 1 << 16;

struct Failures {
  std::mutex mu;
  std::vector<std::string> first;
  std::atomic<uint64_t> count{0};
  void Add(std::string msg) {
    count.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    if (first.size() < kMaxReports) first.push_back(std::move(msg));
  }
};

inline float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Runs check over [0, 2^32) split across the hardware threads, then expects
// no failure and reports the first ones.
inline void ForAllFloats(
    const std::function<void(uint64_t, uint64_t, Failures*)>& check) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t total = uint64_t{1} << 32;
  const uint64_t per = (total / threads + kChunk - 1) / kChunk * kChunk;
  Failures fail;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    const uint64_t b = std::min(total, t * per);
    const uint64_t e = std::min(total, b + per);
    pool.emplace_back(check, b, e, &fail);
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(fail.count.load(), 0u);
  for (const auto& m : fail.first) ADD_FAILURE() << m;
}

}  // namespace gift::exhaustive

#endif  // GIFT_TESTS_EXHAUSTIVE_EXHAUSTIVE_TESTUTIL_H_
