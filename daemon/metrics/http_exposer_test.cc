#include "daemon/metrics/http_exposer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "daemon/metrics/http_testutil.h"
#include "daemon/metrics/metrics.h"

namespace gift::metrics {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// Every exposer here listens on loopback (0.0.0.0 included).
absl::StatusOr<HttpResponse> Fetch(int port, const std::string& path,
                                   const std::string& method = "GET") {
  return HttpFetch("127.0.0.1", port, path, method);
}

std::shared_ptr<Registry> NewRegistry() { return std::make_shared<Registry>(); }

Family<Counter>& AddCounter(Registry* r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*r);
}
Family<Gauge>& AddGauge(Registry* r, const std::string& name,
                        const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*r);
}

TEST(HttpExposerTest, ServesMetricsOnAnyFreePort) {
  auto registry = NewRegistry();
  auto& steps = AddCounter(registry.get(), "gift_steps_total", "Steps.");
  steps.Add({{"rank", "0"}}).Increment(3);
  auto exposer = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(exposer);
  ASSERT_GT((*exposer)->port(), 0);

  auto response = Fetch((*exposer)->port(), "/metrics");
  ASSERT_OK(response);
  EXPECT_EQ(response->status_line, "HTTP/1.1 200 OK");
  EXPECT_THAT(response->headers["content-type"], HasSubstr("text/plain"));
  EXPECT_EQ(response->headers["content-length"],
            std::to_string(response->body.size()));
  // The library's own exposer_* families come first, then the registry's.
  EXPECT_THAT(response->body, HasSubstr(Serialize(*registry)));
  EXPECT_THAT(response->body,
              HasSubstr("# TYPE exposer_scrapes_total counter"));
  EXPECT_THAT(response->body, HasSubstr("gift_steps_total{rank=\"0\"} 3\n"));

  steps.Add({{"rank", "0"}}).Increment();  // every scrape is live
  response = Fetch((*exposer)->port(), "/metrics");
  ASSERT_OK(response);
  EXPECT_THAT(response->body, HasSubstr("gift_steps_total{rank=\"0\"} 4\n"));
}

TEST(HttpExposerTest, OnlyMetricsIsServed) {
  auto registry = NewRegistry();
  auto exposer = HttpExposer::Start("localhost:0", {registry});
  ASSERT_OK(exposer);
  const int port = (*exposer)->port();

  // civetweb matches a handler's URI as a prefix ("/metrics/x" is served
  // too); everything else is 404, a POST included.
  for (const char* path : {"/", "/nope", "/metric"}) {
    auto missing = Fetch(port, path);
    ASSERT_OK(missing);
    EXPECT_THAT(missing->status_line, HasSubstr(" 404 ")) << path;
  }
  auto post = Fetch(port, "/metrics", "POST");
  ASSERT_OK(post);
  EXPECT_THAT(post->status_line, HasSubstr(" 404 "));
}

TEST(HttpExposerTest, PortInUseIsUnavailable) {
  auto registry = NewRegistry();
  auto first = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(first);
  const std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = HttpExposer::Start(taken, {registry});
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(second.status().message(), HasSubstr(taken));
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  // The failed start must not disturb the running exposer.
  EXPECT_OK(Fetch((*first)->port(), "/metrics"));
}

TEST(HttpExposerTest, MalformedAddressIsInvalidArgument) {
  auto registry = NewRegistry();
  for (const char* bad :
       {"nonsense", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1",
        "127.0.0.1:80x", "example.com:80", "[::1:80"}) {
    EXPECT_THAT(HttpExposer::Start(bad, {registry}),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

TEST(HttpExposerTest, DestructionStopsServing) {
  auto registry = NewRegistry();
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0"}) {
    auto exposer = HttpExposer::Start(listen, {registry});
    ASSERT_OK(exposer);
    const int port = (*exposer)->port();
    ASSERT_OK(Fetch(port, "/metrics"));
    exposer->reset();
    int fd = ConnectTcp("127.0.0.1", port);
    if (fd >= 0) close(fd);
    EXPECT_LT(fd, 0) << listen << ": port " << port << " still accepts";
  }
}

TEST(HttpExposerTest, ConcurrentScrapesWhileUpdating) {
  auto registry = NewRegistry();
  Counter& c = AddCounter(registry.get(), "c_total", "C.").Add({});
  auto exposer = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(exposer);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!done.load()) c.Increment();
  });
  std::vector<std::thread> scrapers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    scrapers.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto r = Fetch((*exposer)->port(), "/metrics");
        if (r.ok() && r->status_line == "HTTP/1.1 200 OK" &&
            r->body.find(
                "# HELP c_total C.\n# TYPE c_total counter\nc_total ") !=
                std::string::npos) {
          ++good;
        }
      }
    });
  }
  for (auto& s : scrapers) s.join();
  done.store(true);
  writer.join();
  EXPECT_EQ(good.load(), 40);
}

// A GET /metrics that must be answered within `limit` in all (a scraper's
// own timeout; Prometheus' default is 10 s).
absl::StatusOr<HttpResponse> ScrapeWithin(int port, absl::Duration limit) {
  const int fd = ConnectTcp("127.0.0.1", port);
  if (fd < 0) return absl::UnavailableError("connect");
  const absl::Time deadline = absl::Now() + limit;
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
      "close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send");
  }
  std::string raw;
  char buf[65536];
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <=
        0) {
      continue;  // timed out (the loop ends) or EINTR
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) {
      ::close(fd);
      return ParseHttpResponse(raw);
    }
    if (n < 0 && errno != EINTR) break;
    if (n > 0) raw.append(buf, n);
  }
  ::close(fd);
  return absl::DeadlineExceededError(
      absl::StrCat("no complete response within ", absl::FormatDuration(limit),
                   " (", raw.size(), " bytes)"));
}

// Issue 13: with two civetweb threads and a 10 s request timeout, two idle
// connections delayed a scrape by 9.7 s and 200 made it time out.
TEST(HttpExposerTest, IdleConnectionsDoNotStarveAScrape) {
  auto registry = NewRegistry();
  AddGauge(registry.get(), "g", "G.").Add({}).Set(1);
  auto exposer = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(exposer);
  std::vector<int> idle;
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectTcp("127.0.0.1", (*exposer)->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // A slow one too: half a request line, then nothing.
  ASSERT_EQ(::send(idle[0], "GET /met", 8, MSG_NOSIGNAL), 8);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<HttpResponse> r =
        ScrapeWithin((*exposer)->port(), absl::Seconds(5));
    ASSERT_OK(r) << "scrape " << i;
    EXPECT_EQ(r->status_line, "HTTP/1.1 200 OK");
    EXPECT_THAT(r->body, HasSubstr("g 1\n"));
  }
  for (int fd : idle) ::close(fd);
}

// An idle connection does not hold a thread for long: the server closes it.
TEST(HttpExposerTest, AnIdleConnectionIsClosedSoon) {
  auto registry = NewRegistry();
  auto exposer = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(exposer);
  const int fd = ConnectTcp("127.0.0.1", (*exposer)->port());
  ASSERT_GE(fd, 0);
  pollfd p{fd, POLLIN, 0};
  // Generous next to the 2 s request timeout; the old one was 10 s.
  ASSERT_EQ(::poll(&p, 1, 8000), 1) << "still open after 8 s";
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);  // closed (or reset), no data
  ::close(fd);
}

// --- promtool: the exposition must parse and lint clean. ---

std::string FindPromtool() {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  std::istringstream dirs(path + ":/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir + "/promtool";
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct CheckResult {
  int exit_code = -1;
  std::string output;
};

// Runs `promtool check metrics < text` and returns its exit code and output.
CheckResult PromtoolCheck(const std::string& promtool, const std::string& text,
                          const std::string& tag) {
  const std::string base = ::testing::TempDir() + "gift_promtool_" + tag + "_" +
                           std::to_string(getpid());
  std::ofstream(base + ".prom") << text;
  std::string cmd =
      promtool + " check metrics < " + base + ".prom > " + base + ".out 2>&1";
  int status = std::system(cmd.c_str());
  CheckResult result;
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  std::ifstream out(base + ".out");
  result.output.assign(std::istreambuf_iterator<char>(out), {});
  std::remove((base + ".prom").c_str());
  std::remove((base + ".out").c_str());
  return result;
}

// Label values with quotes, backslashes and newlines are escaped by the
// library. HELP text is not (prometheus-cpp 1.0.1 writes it raw), so giftd's
// help strings are single lines without backslashes (metrics.h).
void FillRealisticRegistry(Registry* registry) {
  auto& bytes = AddCounter(registry, "gift_bytes_sent_total",
                           "Bytes sent on the wire, by path.");
  auto& hits = AddCounter(registry, "gift_boundary_hits_total",
                          "FP8 codes at the format's boundary, upper and "
                          "lower.");
  auto& rel = AddGauge(registry, "gift_quantization_rel_l2",
                       "RelL2 of the local round trip.");
  auto& ranks = AddGauge(registry, "gift_ranks_registered",
                         "Ranks registered with this daemon.");
  auto& duration = prometheus::BuildHistogram()
                       .Name("gift_collective_duration_seconds")
                       .Help("Collective time, in seconds.")
                       .Register(*registry);
  AddGauge(registry, "gift_plan_epoch", "Plan epoch (no children yet).");
  for (int rank = 0; rank < 2; ++rank) {
    for (const char* layer :
         {"model.layers.0.mlp.fc2", "odd \"quoted\" \\ x"}) {
      for (const char* path : {"euclidean", "gift"}) {
        const Labels v = {{"job_id", "job-7"},
                          {"node", "node\n1"},
                          {"rank", std::to_string(rank)},
                          {"layer", layer},
                          {"path", path}};
        bytes.Add(v).Increment(1 << 20);
        hits.Add(v).Increment(17);
        rel.Add(v).Set(0.0264 / (rank + 1));
        for (double d : {0.0003, 0.002, 0.05, 3.0}) {
          duration
              .Add(v,
                   Histogram::BucketBoundaries{0.0005, 0.001, 0.01, 0.1, 1, 10})
              .Observe(d);
        }
      }
    }
  }
  ranks.Add({}).Set(2);
}

TEST(HttpExposerTest, PromtoolAcceptsLiveScrape) {
  const std::string promtool = FindPromtool();
  if (promtool.empty())
    GTEST_SKIP() << "promtool not found (Debian prometheus)";
  auto registry = NewRegistry();
  FillRealisticRegistry(registry.get());
  auto exposer = HttpExposer::Start("127.0.0.1:0", {registry});
  ASSERT_OK(exposer);
  auto response = Fetch((*exposer)->port(), "/metrics");
  ASSERT_OK(response);
  ASSERT_THAT(response->body, HasSubstr("node=\"node\\n1\""));
  ASSERT_THAT(response->body, HasSubstr("layer=\"odd \\\"quoted\\\" \\\\ x\""));

  CheckResult result = PromtoolCheck(promtool, response->body, "good");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "");
}

TEST(HttpExposerTest, PromtoolRejectsBrokenExposition) {
  const std::string promtool = FindPromtool();
  if (promtool.empty())
    GTEST_SKIP() << "promtool not found (Debian prometheus)";
  // Lint problem: a counter without _total.
  CheckResult lint = PromtoolCheck(promtool,
                                   "# HELP gift_steps Steps.\n"
                                   "# TYPE gift_steps counter\n"
                                   "gift_steps 1\n",
                                   "lint");
  EXPECT_NE(lint.exit_code, 0);
  EXPECT_THAT(lint.output, HasSubstr("_total"));
  // Parse error: an unescaped quote inside a label value.
  CheckResult parse = PromtoolCheck(promtool,
                                    "# HELP g G.\n# TYPE g gauge\n"
                                    "g{layer=\"a\"b\"} 1\n",
                                    "parse");
  EXPECT_NE(parse.exit_code, 0);
  EXPECT_NE(parse.output, "");
}

}  // namespace
}  // namespace gift::metrics
