// The factor refresher's worker threads (DESIGN §1, §2): each thread owns a
// FactorBuilder (CPU, or on a GPU its own CUDA stream and cuSOLVER handle)
// and turns submitted jobs — a layer's summed sketch window — into factors.
// Nothing here touches shared memory or blocks a rank: the daemon's poll
// loop submits jobs and publishes the results it takes back. The worker
// threads run at nice kRefreshNice, so on a node whose cores the ranks keep
// busy a refresh takes idle CPU time rather than a rank's.
//
//   ASSIGN_OR_RETURN(auto refresher, Refresher::Create(2, /*device=*/-1));
//   refresher->Submit(std::move(job));
//   for (RefreshResult& r : refresher->TakeResults()) Publish(r);
//
// Thread safety: Submit/TakeResults/Busy are thread-safe.
#ifndef GIFT_DAEMON_REFRESHER_H_
#define GIFT_DAEMON_REFRESHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/factor_builder.h"

namespace gift::daemon {

struct RefreshJob {
  std::string layer;
  int64_t version = 0;  // the version the result will carry
  bool full = false;
  int64_t d = 0;
  // Low-rank: summed sketch (d × k) in basis omega (d × k).
  int64_t k = 0;
  std::vector<float> y, omega;
  int r = 0;
  int k_next = 0;
  uint64_t seed = 0;
  // Full: summed Σaᵀa (d × d).
  std::vector<float> a;
  double trace = 0;
  int64_t count = 0;
  double beta = 1;
  int64_t end_step = 0;  // the window's end (for the factor's age)
};

struct RefreshResult {
  std::string layer;
  int64_t version = 0;
  bool full = false;
  int64_t end_step = 0;
  double beta = 1;
  absl::Status status;
  LowRankFactorData low_rank;
  FullFactorData dense;
  double seconds = 0;
};

// Nice value of the refresher threads (Linux: per thread).
inline constexpr int kRefreshNice = 10;

class Refresher {
 public:
  // threads >= 1. device < 0: CPU builders.
  static absl::StatusOr<std::unique_ptr<Refresher>> Create(int threads,
                                                           int device);
  ~Refresher();  // finishes the running jobs, drops queued ones

  // Queues a job. FAILED_PRECONDITION when a job for the same layer is
  // queued or running (the caller retries with a later window).
  absl::Status Submit(RefreshJob job);
  std::vector<RefreshResult> TakeResults();
  bool Busy(const std::string& layer) const;
  int Pending() const;

 private:
  Refresher() = default;
  void Work(FactorBuilder* builder);
  static RefreshResult Run(FactorBuilder& builder, const RefreshJob& job);

  mutable absl::Mutex mu_;
  std::deque<RefreshJob> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
  std::vector<RefreshResult> done_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<FactorBuilder>> builders_;
  std::vector<std::thread> threads_;
};

}  // namespace gift::daemon

#endif  // GIFT_DAEMON_REFRESHER_H_
