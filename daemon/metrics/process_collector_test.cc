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
#include "daemon/metrics/metrics.h"

namespace gift::metrics {
namespace {

// The value of the unlabelled sample `name` in a scrape of the collector.
double Sample(const ProcessCollector& c, const std::string& name) {
  const std::string text = Serialize(c);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    double v;
    if (f.size() == 2 && f[0] == name && absl::SimpleAtod(f[1], &v)) return v;
  }
  ADD_FAILURE() << "no sample " << name << " in\n" << text;
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
  ProcessCollector process;
  const std::string text = Serialize(process);
  for (const char* line :
       {"# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_GT(Sample(process, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(Sample(process, "process_virtual_memory_bytes"),
            Sample(process, "process_resident_memory_bytes"));
  EXPECT_GE(Sample(process, "process_open_fds"), 3);  // stdin/out/err
  EXPECT_GE(Sample(process, "process_max_fds"),
            Sample(process, "process_open_fds"));
  // Started within the last hour (the test binary just started), not later
  // than now.
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6;
  const double start = Sample(process, "process_start_time_seconds");
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
}

TEST(ProcessCollectorTest, TracksCpuAndDescriptors) {
  ProcessCollector process;
  const double cpu0 = Sample(process, "process_cpu_seconds_total");
  const double fds0 = Sample(process, "process_open_fds");
  int opened[4];
  for (int& fd : opened) fd = ::open("/dev/null", O_RDONLY);
  // Burn 0.2 s of this process's CPU time (not wall time: the machine may
  // be busy).
  volatile double x = 0;
  const std::clock_t until = std::clock() + CLOCKS_PER_SEC / 5;
  while (std::clock() < until) x = x + std::sqrt(x + 1);
  EXPECT_EQ(Sample(process, "process_open_fds"), fds0 + 4);
  EXPECT_GE(Sample(process, "process_cpu_seconds_total"), cpu0 + 0.1);
  for (int fd : opened) ::close(fd);
  EXPECT_EQ(Sample(process, "process_open_fds"), fds0);
}

// Beside a registry, as giftd serves them: both in one scrape, each family
// once.
TEST(ProcessCollectorTest, ScrapedBesideARegistry) {
  Registry registry;
  prometheus::BuildGauge().Name("g").Help("h").Register(registry).Add({}).Set(
      2);
  ProcessCollector process;
  const std::string text = Serialize(registry) + Serialize(process);
  EXPECT_NE(text.find("\ng 2\n"), std::string::npos) << text;
  size_t n = 0;
  for (size_t at = text.find("# TYPE process_open_fds gauge");
       at != std::string::npos;
       at = text.find("# TYPE process_open_fds gauge", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 1u) << text;
}

}  // namespace
}  // namespace gift::metrics
