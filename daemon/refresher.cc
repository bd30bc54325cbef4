#include "daemon/refresher.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gift::daemon {

absl::StatusOr<std::unique_ptr<Refresher>> Refresher::Create(int threads,
                                                             int device) {
  if (threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("refresh_threads must be >= 1 (got ", threads, ")"));
  }
  std::unique_ptr<Refresher> r(new Refresher());
  for (int i = 0; i < threads; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<FactorBuilder> b,
                     FactorBuilder::Create(device));
    r->builders_.push_back(std::move(b));
  }
  for (auto& b : r->builders_) {
    r->threads_.emplace_back([rp = r.get(), bp = b.get()] { rp->Work(bp); });
  }
  return r;
}

Refresher::~Refresher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status Refresher::Submit(RefreshJob job) {
  absl::MutexLock lock(&mu_);
  if (busy_.count(job.layer)) {
    return absl::FailedPreconditionError(
        absl::StrCat("a refresh of ", job.layer, " is already in progress"));
  }
  busy_.insert(job.layer);
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

std::vector<RefreshResult> Refresher::TakeResults() {
  absl::MutexLock lock(&mu_);
  std::vector<RefreshResult> out;
  out.swap(done_);
  return out;
}

bool Refresher::Busy(const std::string& layer) const {
  absl::MutexLock lock(&mu_);
  return busy_.count(layer) > 0;
}

int Refresher::Pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(busy_.size());
}

void Refresher::Work(FactorBuilder* builder) {
  // Best effort: an unprivileged process may always lower its priority.
  setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)),
              kRefreshNice);
  for (;;) {
    RefreshJob job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    RefreshResult result = Run(*builder, job);
    absl::MutexLock lock(&mu_);
    busy_.erase(job.layer);
    done_.push_back(std::move(result));
  }
}

RefreshResult Refresher::Run(FactorBuilder& builder, const RefreshJob& job) {
  RefreshResult out;
  out.layer = job.layer;
  out.version = job.version;
  out.full = job.full;
  out.end_step = job.end_step;
  out.beta = job.beta;
  const auto start = std::chrono::steady_clock::now();
  if (job.full) {
    auto f = builder.Full(job.a, job.d, job.trace, job.count, job.beta);
    out.status = f.status();
    if (f.ok()) out.dense = *std::move(f);
  } else {
    auto f = builder.LowRank(job.y, job.omega, job.d, job.k, job.trace,
                             job.count, job.r, job.beta, job.k_next, job.seed);
    out.status = f.status();
    if (f.ok()) out.low_rank = *std::move(f);
  }
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return out;
}

}  // namespace gift::daemon
