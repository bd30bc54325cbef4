// giftctl end to end without giftd: the grammar, the binary's exit codes,
// and every command against an in-process fake Control server.
#include "tools/giftctl/cli.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status_matchers.h"
#include "common/testing.h"
#include "daemon/selection_policy_schema.h"
#include "gift/v1/control.grpc.pb.h"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/format.h"

namespace gift::giftctl {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<Invocation> Parse(std::vector<std::string> args,
                                 const std::string& env = "") {
  return ParseCommandLine(args, env);
}

void ExpectUsage(std::vector<std::string> args, const std::string& message) {
  absl::StatusOr<Invocation> inv = Parse(args);
  ASSERT_THAT(inv, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(inv.status().message(), message);
}

TEST(ParseTest, GlobalOptionsAnywhere) {
  absl::StatusOr<Invocation> inv =
      Parse({"--address=h:1", "layers", "--json", "--timeout", "2.5",
             "--token-file", "/t", "--tls-ca=/ca.pem"});
  ASSERT_OK(inv);
  EXPECT_EQ(inv->address, "h:1");
  EXPECT_EQ(inv->command, Command::kLayers);
  EXPECT_TRUE(inv->json);
  EXPECT_EQ(inv->timeout_seconds, 2.5);
  EXPECT_EQ(inv->token_file, "/t");
  EXPECT_EQ(inv->tls_ca, "/ca.pem");
}

TEST(ParseTest, AddressFromEnvironmentThenFlag) {
  EXPECT_EQ(Parse({"status"})->address, "127.0.0.1:50151");
  EXPECT_EQ(Parse({"status"}, "e:2")->address, "e:2");
  EXPECT_EQ(Parse({"--address", "f:3", "status"}, "e:2")->address, "f:3");
}

TEST(ParseTest, Commands) {
  EXPECT_EQ(Parse({"set-interval", "20"})->set_interval.steps(), 20);
  EXPECT_EQ(Parse({"set-rank", "16"})->set_rank.rank(), 16);
  for (auto [cmd, pin] : std::vector<std::pair<std::string, gift::v1::Pin>>{
           {"pin", gift::v1::PIN_IN},
           {"unpin", gift::v1::PIN_AUTO},
           {"pin-out", gift::v1::PIN_OUT}}) {
    absl::StatusOr<Invocation> inv = Parse({cmd, "fc2"});
    ASSERT_OK(inv);
    EXPECT_EQ(inv->command, Command::kSetLayerPolicy);
    EXPECT_EQ(inv->set_layer_policy.layer(), "fc2");
    EXPECT_EQ(inv->set_layer_policy.settings().pin(), pin) << cmd;
  }
  absl::StatusOr<Invocation> layer =
      Parse({"layer", "fc1", "--transform", "full", "--rank=8", "--beta", "0.5",
             "--format", "e5m2"});
  ASSERT_OK(layer);
  const gift::v1::LayerSettings& s = layer->set_layer_policy.settings();
  EXPECT_EQ(s.pin(), gift::v1::PIN_UNSPECIFIED);
  EXPECT_EQ(s.transform(), gift::v1::TRANSFORM_FULL);
  EXPECT_EQ(s.rank(), 8);
  EXPECT_EQ(s.beta(), 0.5);
  EXPECT_FALSE(s.beta_auto());
  EXPECT_EQ(s.format(), gift::v1::WIRE_FORMAT_E5M2);
  for (auto [name, f] :
       std::vector<std::pair<std::string, gift::v1::WireFormat>>{
           {"e4m3", gift::v1::WIRE_FORMAT_E4M3},
           {"nvfp4", gift::v1::WIRE_FORMAT_NVFP4},
           {"MXFP4", gift::v1::WIRE_FORMAT_MXFP4}}) {
    absl::StatusOr<Invocation> inv = Parse({"layer", "fc1", "--format", name});
    ASSERT_OK(inv);
    EXPECT_EQ(inv->set_layer_policy.settings().format(), f) << name;
  }
  absl::StatusOr<Invocation> automatic =
      Parse({"layer", "fc1", "--beta", "auto"});
  ASSERT_OK(automatic);
  EXPECT_TRUE(automatic->set_layer_policy.settings().beta_auto());
  EXPECT_EQ(automatic->set_layer_policy.settings().beta(), 0);
  EXPECT_EQ(Parse({"refresh"})->refresh.layer(), "");
  EXPECT_EQ(Parse({"refresh", "fc2"})->refresh.layer(), "fc2");
  absl::StatusOr<Invocation> watch =
      Parse({"watch", "--interval", "200", "--count=3"});
  ASSERT_OK(watch);
  EXPECT_EQ(watch->watch.interval_ms(), 200);
  EXPECT_EQ(watch->watch_count, 3);
  absl::StatusOr<Invocation> health = Parse({"health", "--timeout", "1"});
  ASSERT_OK(health);
  EXPECT_EQ(health->command, Command::kHealth);
  EXPECT_EQ(health->health_service, "");
  EXPECT_EQ(health->timeout_seconds, 1);
  EXPECT_EQ(Parse({"health", "--service=gift.v1.Control"})->health_service,
            "gift.v1.Control");
}

TEST(ParseTest, PolicyFields) {
  absl::StatusOr<Invocation> inv =
      Parse({"policy", "--kind", "threshold", "--top-k", "4", "--threshold",
             "0.02", "--hysteresis=0.2", "--window", "30", "--max-layers", "5",
             "--max-flops", "1e12", "--min-gain", "0.1"});
  ASSERT_OK(inv);
  const gift::v1::SelectionPolicy& p = inv->set_policy.policy();
  EXPECT_EQ(p.kind(), gift::v1::SELECTION_KIND_THRESHOLD);
  EXPECT_EQ(p.top_k(), 4);
  EXPECT_EQ(p.threshold(), 0.02);
  EXPECT_EQ(p.hysteresis(), 0.2);
  EXPECT_EQ(p.window_steps(), 30);
  EXPECT_EQ(p.max_layers(), 5);
  EXPECT_EQ(p.max_extra_flops(), 1e12);
  EXPECT_EQ(p.min_gain(), 0.1);
  EXPECT_FALSE(p.has_entry_gain() || p.has_entry_probes() ||
               p.has_gain_hold() || p.has_warmup_steps() ||
               p.has_plan_interval_steps() || p.has_audit_window() ||
               p.has_audit_margin());
  // The plan pace and the audit rule.
  inv = Parse({"policy", "--entry-gain=0.2", "--entry-probes", "4",
               "--gain-hold", "1.5", "--warmup=50", "--plan-interval", "0",
               "--audit-window", "4", "--audit-margin=0.2"});
  ASSERT_OK(inv);
  const gift::v1::SelectionPolicy& s = inv->set_policy.policy();
  EXPECT_EQ(s.entry_gain(), 0.2);
  EXPECT_EQ(s.entry_probes(), 4);
  EXPECT_EQ(s.gain_hold(), 1.5);
  EXPECT_EQ(s.warmup_steps(), 50);
  EXPECT_TRUE(s.has_plan_interval_steps());  // a present 0: pace off
  EXPECT_EQ(s.plan_interval_steps(), 0);
  EXPECT_EQ(s.audit_window(), 4);
  EXPECT_EQ(s.audit_margin(), 0.2);
  ExpectUsage({"policy", "--gain-hold", "0.5"},
              "--gain-hold: must be in [1, 1000], got 0.5");
  ExpectUsage({"policy", "--audit-window", "0"},
              "--audit-window: must be in [1, 1000], got 0");
  ExpectUsage({"policy", "--audit-margin", "11"},
              "--audit-margin: must be in [0, 10], got 11");
  ExpectUsage({"policy", "--plan-interval", "-1"},
              "--plan-interval: must be in [0, 1000000], got -1");
  ExpectUsage({"policy", "--warmup", "-1"},
              "--warmup: must be in [0, 1000000], got -1");
  // Nothing given: every field absent, "keep".
  EXPECT_EQ(Parse({"policy"})->set_policy.policy().ByteSizeLong(), 0u);
  EXPECT_FALSE(Parse({"policy"})->set_policy.policy().has_max_layers());
  // A 0 is sent as a present 0 (issue 14: --max-layers 0 lifts the budget).
  inv = Parse({"policy", "--max-layers", "0", "--min-gain=0", "--threshold",
               "0", "--hysteresis", "0", "--max-flops", "0"});
  ASSERT_OK(inv);
  const gift::v1::SelectionPolicy& z = inv->set_policy.policy();
  EXPECT_TRUE(z.has_max_layers() && z.has_min_gain() && z.has_threshold() &&
              z.has_hysteresis() && z.has_max_extra_flops());
  EXPECT_FALSE(z.has_top_k() || z.has_window_steps());
  EXPECT_EQ(z.max_layers(), 0);
  EXPECT_EQ(z.min_gain(), 0);
}

// Every field of the selection policy's schema is a `policy` option that
// the usage lists, and its range is the schema's, at both ends.
TEST(ParseTest, PolicyOptionsFollowTheSchema) {
  const std::string usage = kUsage;
  EXPECT_THAT(usage,
              HasSubstr("--kind " + daemon::SelectionKindList("|", "|")));
  for (const daemon::PolicyField& f : daemon::kPolicyFields) {
    const std::string option = std::string("--") + f.flag;
    EXPECT_THAT(usage, HasSubstr("[" + option + " ")) << f.name;
    const bool is_int = f.type == daemon::PolicyField::Type::kInt;
    auto text = [is_int](double v) {
      return is_int ? std::to_string(static_cast<long long>(v))
                    : std::to_string(v);
    };
    EXPECT_OK(Parse({"policy", option, text(f.min)})) << f.name;
    std::vector<double> outside = {f.min - 1};
    if (f.HasMax()) outside.push_back(f.max_open ? f.max : f.max + 1);
    for (double v : outside) {
      absl::StatusOr<Invocation> inv = Parse({"policy", option, text(v)});
      EXPECT_THAT(inv, StatusIs(absl::StatusCode::kInvalidArgument)) << v;
      EXPECT_THAT(std::string(inv.status().message()),
                  HasSubstr(option + ": must be "));
    }
  }
  for (const daemon::SelectionKindSpelling& k : daemon::kSelectionKinds) {
    absl::StatusOr<Invocation> inv = Parse({"policy", "--kind", k.name});
    ASSERT_OK(inv);
    EXPECT_EQ(inv->set_policy.policy().kind(), ProtoSelectionKind(k.kind));
  }
}

TEST(ParseTest, UsageErrors) {
  ExpectUsage({}, "missing command");
  ExpectUsage({"frobnicate"}, "unknown command 'frobnicate'");
  ExpectUsage({"status", "extra"}, "status: expected 0 arguments, got 1");
  ExpectUsage({"set-rank"}, "set-rank: expected 1 argument, got 0");
  ExpectUsage({"set-rank", "abc"}, "set-rank: expected an integer, got 'abc'");
  ExpectUsage({"refresh", "a", "b"}, "refresh: expected 0-1 arguments, got 2");
  ExpectUsage({"layers", "--rank=3"}, "layers: unknown option '--rank'");
  ExpectUsage({"pin", "fc2", "--rank=3"}, "pin: unknown option '--rank'");
  ExpectUsage({"--bogus=1"}, "unknown option '--bogus'");
  ExpectUsage({"layer", "fc2", "--transform", "diag"},
              "--transform: expected lowrank or full, got 'diag'");
  ExpectUsage({"layer", "fc2", "--format", "fp4"},
              "--format: unknown wire format 'fp4' (want e4m3, e5m2, nvfp4 or "
              "mxfp4)");
  ExpectUsage({"layer", "fc2", "--beta", "x"},
              "--beta: expected a number, got 'x'");
  ExpectUsage({"policy", "--kind", "best"},
              "--kind: expected top-k, elbow or threshold, got 'best'");
  ExpectUsage({"status", "--timeout", "0"},
              "--timeout: must be in (0, 86400], got 0");
  ExpectUsage({"status", "--timeout"}, "--timeout: missing value");
  ExpectUsage({"--json=1", "status"}, "--json: takes no value");
  ExpectUsage({"watch", "--count", "2", "--count", "3"},
              "--count: given more than once");
  ExpectUsage({"health", "x"}, "health: expected 0 arguments, got 1");
  ExpectUsage({"health", "--wait=1"}, "health: unknown option '--wait'");
}

// Every numeric argument and option is checked before any call: a value
// giftd would refuse, or read as 0 = "keep", or one a field cannot hold is
// a usage error naming the option (issue 13: `policy --top-k -1` was sent
// as nothing and exited 0).
TEST(ParseTest, NumbersOutOfRangeAreUsageErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"policy", "--top-k", "-1"}, "--top-k: must be in [1, 1000000], got -1"},
      {{"policy", "--top-k=-7"}, "--top-k: must be in [1, 1000000], got -7"},
      {{"policy", "--top-k=1000001"},
       "--top-k: must be in [1, 1000000], got 1000001"},
      {{"policy", "--window", "-1"},
       "--window: must be in [1, 1000000], got -1"},
      {{"policy", "--window", "0"}, "--window: must be in [1, 1000000], got 0"},
      {{"policy", "--top-k", "0"}, "--top-k: must be in [1, 1000000], got 0"},
      {{"policy", "--max-layers", "-1"},
       "--max-layers: must be in [0, 1000000], got -1"},
      {{"policy", "--top-k", "3000000000"},
       "--top-k: expected an integer, got '3000000000'"},
      {{"policy", "--threshold", "1.5"},
       "--threshold: must be in [0, 1], got 1.5"},
      {{"policy", "--threshold", "-0.1"},
       "--threshold: must be in [0, 1], got -0.1"},
      {{"policy", "--hysteresis", "1"},
       "--hysteresis: must be in [0, 1), got 1"},
      {{"policy", "--min-gain", "-0.5"},
       "--min-gain: must be in [0, 1), got -0.5"},
      {{"policy", "--max-flops", "-1"}, "--max-flops: must be >= 0, got -1"},
      {{"policy", "--max-flops", "inf"},
       "--max-flops: expected a number, got 'inf'"},
      {{"set-interval", "0"}, "set-interval: must be in [1, 1000000], got 0"},
      {{"set-interval", "-3"}, "set-interval: must be in [1, 1000000], got -3"},
      {{"set-interval", "1000001"},
       "set-interval: must be in [1, 1000000], got 1000001"},
      {{"set-rank", "0"}, "set-rank: must be >= 1, got 0"},
      {{"set-rank", "99999999999"},
       "set-rank: expected an integer, got '99999999999'"},
      {{"layer", "fc2", "--rank", "-1"}, "--rank: must be >= 1, got -1"},
      {{"layer", "fc2", "--rank", "0"},
       "layer: --rank 0 cannot be sent (0 keeps the current value)"},
      {{"layer", "fc2", "--beta", "-1"},
       "--beta: must be in [1e-08, 1e+08], got -1"},
      {{"layer", "fc2", "--beta", "1e9"},
       "--beta: must be in [1e-08, 1e+08], got 1e9"},
      {{"layer", "fc2", "--beta=0"},
       "layer: --beta 0 cannot be sent (0 keeps the current value)"},
      {{"layer", "fc2", "--beta", "nan"},
       "--beta: expected a number, got 'nan'"},
      {{"watch", "--interval", "-1"}, "--interval: must be >= 0, got -1"},
      {{"watch", "--interval", "10"},
       "--interval: must be 0 (the default) or >= 50 ms, got 10"},
      {{"watch", "--count", "-1"}, "--count: must be >= 0, got -1"},
      {{"status", "--timeout", "-1"},
       "--timeout: must be in (0, 86400], got -1"},
      {{"status", "--timeout", "1e300"},
       "--timeout: must be in (0, 86400], got 1e300"},
  };
  for (const auto& [args, message] : cases) ExpectUsage(args, message);
  // The edges that are fine.
  EXPECT_EQ(
      Parse({"policy", "--max-layers", "1"})->set_policy.policy().max_layers(),
      1);
  EXPECT_EQ(
      Parse({"policy", "--threshold", "1"})->set_policy.policy().threshold(),
      1);
  EXPECT_EQ(Parse({"watch", "--interval", "0"})->watch.interval_ms(), 0);
  EXPECT_EQ(Parse({"watch", "--interval", "50"})->watch.interval_ms(), 50);
  EXPECT_EQ(Parse({"status", "--timeout", "86400"})->timeout_seconds, 86400);
  EXPECT_EQ(Parse({"set-interval", "1000000"})->set_interval.steps(), 1000000);
  EXPECT_EQ(Parse({"layer", "fc2", "--beta", "1e8"})
                ->set_layer_policy.settings()
                .beta(),
            1e8);
}

TEST(ParseTest, HelpNeedsNoCommand) {
  absl::StatusOr<Invocation> inv = Parse({"--help"});
  ASSERT_OK(inv);
  EXPECT_TRUE(inv->help);
}

// ---- the binary

struct BinaryRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

// Bounded by `timeout`: a giftctl that hangs fails the test (exit 124).
BinaryRun RunBinary(const std::string& args) {
  std::string cmd =
      "timeout 30 " + std::string(GIFTCTL_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(BinaryTest, UsageErrorsExitTwoWithUsageLine) {
  for (const char* args : {"", "frobnicate", "set-rank abc", "--bogus status",
                           "layer", "status --timeout"}) {
    BinaryRun r = RunBinary(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("giftctl: ")) << args;
    EXPECT_THAT(r.output, HasSubstr("usage: giftctl")) << args;
  }
}

// Out of range: exit 2 before any call (nothing listens on port 1: a call
// would fail with UNAVAILABLE and exit 1).
TEST(BinaryTest, OutOfRangeNumbersExitTwoBeforeAnyCall) {
  for (const char* args :
       {"policy --top-k -1", "policy --window -1", "policy --max-layers -1",
        "set-interval -1", "set-rank 0", "layer fc2 --rank -1",
        "layer fc2 --beta -1", "watch --interval -1",
        "layer fc2 --format nvfp8"}) {
    BinaryRun r = RunBinary(std::string("--address 127.0.0.1:1 ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("usage: giftctl")) << args;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("UNAVAILABLE"))) << args;
  }
}

TEST(BinaryTest, HelpExitsZero) {
  BinaryRun r = RunBinary("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd :
       {"status", "layers", "set-interval", "set-rank", "pin ", "unpin",
        "pin-out", "layer", "policy", "refresh", "watch", "health"}) {
    EXPECT_THAT(r.output, HasSubstr(cmd));
  }
}

TEST(BinaryTest, UnreachableDaemonExitsOneWithCodeName) {
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  BinaryRun r = RunBinary("--address 127.0.0.1:1 --timeout 5 status");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("giftctl: GetStatus: UNAVAILABLE: "));
}

TEST(BinaryTest, MissingTokenFileExitsOne) {
  BinaryRun r = RunBinary("--token-file /nonexistent/token status");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot read token file '/nonexistent/"));
}

// Token and CA files are regular files of bounded size: /dev/zero, a FIFO
// (no writer) or a directory fail at once instead of reading forever,
// blocking or failing later.
TEST(BinaryTest, TokenAndCaFilesMustBeRegularFiles) {
  gift::testing::TempDir tmp("giftctl_cli_test");
  ASSERT_TRUE(tmp.ok());
  const std::string dir = tmp.path();
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path :
       {std::string("/dev/zero"), fifo, std::string(dir)}) {
    BinaryRun r =
        RunBinary("--address 127.0.0.1:1 --token-file " + path + " status");
    EXPECT_EQ(r.exit_code, 1) << path << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("cannot read token file '" + path +
                                    "': not a regular file"));
    r = RunBinary("--address 127.0.0.1:1 --tls-ca " + path + " status");
    EXPECT_EQ(r.exit_code, 1) << path << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("cannot read CA file '" + path +
                                    "': not a regular file"));
  }
  unlink(fifo.c_str());
}

}  // namespace
}  // namespace gift::giftctl
