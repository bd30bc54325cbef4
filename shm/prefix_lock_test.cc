#include "shm/prefix_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm/region.h"

namespace gift::shm {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Prefix() { return absl::StrCat("/gift-lktest", getpid()); }

TEST(PrefixLockTest, OneHolderAtATime) {
  auto first = PrefixLock::Acquire(Prefix());
  ASSERT_OK(first);
  EXPECT_EQ((*first)->name(), absl::StrCat("/.gift-lktest", getpid(), ".lock"));
  auto second = PrefixLock::Acquire(Prefix());
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr(absl::StrCat("in use by another "
                                                      "giftd (pid ",
                                                      getpid()))));
  // Another prefix is another lock, even one that starts the same.
  EXPECT_OK(PrefixLock::Acquire(Prefix() + "0"));
  first->reset();
  EXPECT_OK(PrefixLock::Acquire(Prefix()));
}

// The lock object is hidden from the prefix's listing (which a starting
// giftd empties) and gone once released.
TEST(PrefixLockTest, HiddenAndRemovedOnRelease) {
  auto lock = PrefixLock::Acquire(Prefix());
  ASSERT_OK(lock);
  auto names = ListPosixObjects(Prefix());
  ASSERT_OK(names);
  EXPECT_THAT(*names, IsEmpty());
  const std::string path = "/dev/shm" + (*lock)->name();
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  lock->reset();
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

// Held by another process: refused, naming it; free once it is gone, even
// when it died without releasing (the object stays, the lock does not).
TEST(PrefixLockTest, AnotherProcessAndACrashedHolder) {
  const std::string prefix = Prefix();  // the parent's pid
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    auto lock = PrefixLock::Acquire(prefix);
    char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // killed below, without releasing
    _exit(0);
  }
  ASSERT_GT(child, 0);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_THAT(PrefixLock::Acquire(prefix),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("pid ", child))));
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_OK(PrefixLock::Acquire(prefix));
  close(ready[0]);
  close(ready[1]);
}

TEST(PrefixLockTest, BadPrefix) {
  EXPECT_THAT(PrefixLock::Acquire("gift"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PrefixLock::Acquire("/a/b"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gift::shm
