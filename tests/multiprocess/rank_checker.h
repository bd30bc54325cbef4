// The expectations of a rank process (the multiprocess and GPU workers): a
// failed one is printed with the rank and counted, the run goes on, and the
// process exits with exit_code() at the end.
//
//   RankChecker check(rank);
//   check.ExpectOk(ar->Run(...), "step 3");
//   check.Expect(a == b, "parameters equal on every rank");
//   return check.exit_code();
//
// Thread safety: not thread-safe; one per rank process.
#ifndef GIFT_TESTS_MULTIPROCESS_RANK_CHECKER_H_
#define GIFT_TESTS_MULTIPROCESS_RANK_CHECKER_H_

#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::testing {

class RankChecker {
 public:
  // The exit code of a run with failed expectations.
  static constexpr int kExitCheckFailed = 1;

  explicit RankChecker(int rank) : rank_(rank) {}
  // Returns ok.
  bool Expect(bool ok, const std::string& what) {
    if (!ok) {
      ++failures_;
      std::cerr << "rank " << rank_ << ": FAILED: " << what << std::endl;
    }
    return ok;
  }
  bool ExpectOk(const absl::Status& s, const std::string& what) {
    return Expect(s.ok(), absl::StrCat(what, ": ", s.ToString()));
  }
  // A check that returns its problem, "" when there is none.
  void ExpectEmpty(const std::string& problem) {
    Expect(problem.empty(), problem);
  }
  int failures() const { return failures_; }
  int exit_code() const { return failures_ == 0 ? 0 : kExitCheckFailed; }

 private:
  const int rank_;
  int failures_ = 0;
};

}  // namespace gift::testing

#endif  // GIFT_TESTS_MULTIPROCESS_RANK_CHECKER_H_
