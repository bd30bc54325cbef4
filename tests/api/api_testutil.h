// Helpers of the public API's tests (tests/api/): temporary directories,
// ranks as threads of one process (each with its own communicator over a
// shared store directory), and deterministic gradients. Uses only the
// public headers and the standard library, as a consumer of libgift would.
//
// Thread safety: RunRanks runs fn on one thread per rank; gtest assertions
// are thread-safe.
#ifndef GIFT_TESTS_API_API_TESTUTIL_H_
#define GIFT_TESTS_API_API_TESTUTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace gift::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with the object.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") +
                       "/gift_api_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

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

// ||a - b|| / ||b|| over [begin, end).
inline double RelL2(const std::vector<float>& a, const std::vector<float>& b,
                    size_t begin, size_t end) {
  double num = 0, den = 0;
  for (size_t i = begin; i < end; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace gift::testing

#endif  // GIFT_TESTS_API_API_TESTUTIL_H_
