#include "daemon/metrics/process_collector.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace gift::metrics {
namespace {

// The value of the unlabelled sample `name` in the registry's text.
double Sample(const Registry& r, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(r.Serialize(), '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    double v;
    if (f.size() == 2 && f[0] == name && absl::SimpleAtod(f[1], &v)) return v;
  }
  ADD_FAILURE() << "no sample " << name << " in\n" << r.Serialize();
  return NAN;
}

TEST(ParseProcStatTest, CommandWithSpacesAndParentheses) {
  // Fields 14/15 utime/stime = 250/50 ticks, 22 starttime = 1000 ticks,
  // 23 vsize, 24 rss pages.
  const std::string text =
      "4242 (gift d) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 "
      "0 8 0 1000 123456789 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 "
      "0 17 1 0 0 0 0 0\n";
  absl::StatusOr<ProcStat> s = ParseProcStat(text, 100, 4096);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(s->start_since_boot_s, 10.0);
  EXPECT_DOUBLE_EQ(s->virtual_bytes, 123456789);
  EXPECT_DOUBLE_EQ(s->resident_bytes, 300.0 * 4096);
}

TEST(ParseProcStatTest, TruncatedOrGarbled) {
  EXPECT_FALSE(ParseProcStat("", 100, 4096).ok());
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 2 3", 100, 4096).ok());
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 a b 0 0 20 0 8 0 "
                             "1000 1 1",
                             100, 4096)
                   .ok());
}

TEST(ParseBootTimeTest, FindsBtime) {
  absl::StatusOr<double> t =
      ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 1700000000);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").ok());
}

TEST(ProcessCollectorTest, ExportsThisProcess) {
  Registry registry;
  ProcessCollector process(&registry, absl::ZeroDuration());
  const std::string text = registry.Serialize();
  for (const char* line :
       {"# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_GT(Sample(registry, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(Sample(registry, "process_virtual_memory_bytes"),
            Sample(registry, "process_resident_memory_bytes"));
  EXPECT_GE(Sample(registry, "process_open_fds"), 3);  // stdin/out/err
  EXPECT_GE(Sample(registry, "process_max_fds"),
            Sample(registry, "process_open_fds"));
  // Started within the last hour (the test binary just started), not later
  // than now.
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6;
  const double start = Sample(registry, "process_start_time_seconds");
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
}

TEST(ProcessCollectorTest, TracksCpuAndDescriptors) {
  Registry registry;
  ProcessCollector process(&registry, absl::ZeroDuration());
  const double cpu0 = Sample(registry, "process_cpu_seconds_total");
  const double fds0 = Sample(registry, "process_open_fds");
  int opened[4];
  for (int& fd : opened) fd = ::open("/dev/null", O_RDONLY);
  // Burn 0.2 s of this process's CPU time (not wall time: the machine may
  // be busy).
  volatile double x = 0;
  const std::clock_t until = std::clock() + CLOCKS_PER_SEC / 5;
  while (std::clock() < until) x = x + std::sqrt(x + 1);
  ASSERT_TRUE(process.Update().ok());
  EXPECT_EQ(Sample(registry, "process_open_fds"), fds0 + 4);
  EXPECT_GE(Sample(registry, "process_cpu_seconds_total"), cpu0 + 0.1);
  for (int fd : opened) ::close(fd);
  ASSERT_TRUE(process.Update().ok());
  EXPECT_EQ(Sample(registry, "process_open_fds"), fds0);
}

TEST(ProcessCollectorTest, ThreadRefreshesAndStops) {
  Registry registry;
  {
    ProcessCollector process(&registry, absl::Milliseconds(20));
    const double fds0 = Sample(registry, "process_open_fds");
    const int fd = ::open("/dev/null", O_RDONLY);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (Sample(registry, "process_open_fds") != fds0 + 1 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(Sample(registry, "process_open_fds"), fds0 + 1);
    ::close(fd);
  }  // the destructor joins the thread promptly (the test would hang)
}

}  // namespace
}  // namespace gift::metrics
