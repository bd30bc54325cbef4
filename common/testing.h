// The helpers every test, test harness and benchmark shares: a temporary
// directory removed with its owner (TempDir), a fresh directory whose caller
// manages its lifetime (MakeTempDir), polling a condition until a deadline
// (WaitUntil), and the relative L2 error ‖x − ref‖ / ‖ref‖ of a result
// against a reference (RelL2). Linked by tests and benchmarks only
// (gift_testing), never by libgift or giftd.
//
//   gift::testing::TempDir dir("gift_store_test");  //
//   $TMPDIR/gift_store_test_XXXXXX ASSERT_TRUE(dir.ok());
//   Write(dir.Sub("a.json"), ...);                   // removed with `dir`
//
//   ASSERT_TRUE(gift::testing::WaitUntil([&] { return Steps() >= 10; },
//                                        absl::Seconds(30)));
//
//   EXPECT_LT(gift::testing::RelL2(got, exact), 0.06);
//
// Thread safety: TempDir is used by one thread (its path() may be read by
// any); MakeTempDir, WaitUntil and RelL2 are safe from any thread (WaitUntil
// calls `done` on the calling thread only).
#ifndef GIFT_COMMON_TESTING_H_
#define GIFT_COMMON_TESTING_H_

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::testing {

// Makes a fresh directory prefix_XXXXXX under $TMPDIR (/tmp when unset or
// empty) and returns its path; the caller removes it. The error is
// "mkdtemp: <strerror>".
absl::StatusOr<std::string> MakeTempDir(absl::string_view prefix);

// A fresh directory (MakeTempDir) removed recursively, errors ignored, when
// the object goes away. path() is "" (and ok() false) when it could not be
// made. Movable, not copyable.
class TempDir {
 public:
  explicit TempDir(absl::string_view prefix = "gift_test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Sub(absl::string_view name) const;
  // Keeps the directory: the object no longer removes it. Returns its path.
  std::string Release();

 private:
  void Remove();

  std::string path_;
};

// Calls `done` until it returns true (then true) or `timeout` has passed
// (then false): `done` is called at least once, and once more after the
// last `poll` sleep that reaches the deadline.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
               absl::Duration poll = absl::Milliseconds(10));

// ‖x − ref‖ / ‖ref‖ over the n values at x and ref, summed in double; ‖x −
// ref‖ when ref is all zero.
template <typename T>
double RelL2(const T* x, const T* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The same over [begin, end) of two vectors.
template <typename T>
double RelL2(const std::vector<T>& x, const std::vector<T>& ref, size_t begin,
             size_t end) {
  return RelL2(x.data() + begin, ref.data() + begin, end - begin);
}

// The same over the whole of two vectors of one size.
template <typename T>
double RelL2(const std::vector<T>& x, const std::vector<T>& ref) {
  return RelL2(x.data(), ref.data(), ref.size());
}

}  // namespace gift::testing

#endif  // GIFT_COMMON_TESTING_H_
