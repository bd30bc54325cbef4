#include "daemon/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "common/testing.h"

namespace gift::daemon {
namespace {

using ::gift::testing::IsOk;
using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

// Every option key, as the header declares them; help and --print-config
// must list each one.
const std::vector<std::string> kKeys = {"node",
                                        "agent_socket",
                                        "control_address",
                                        "metrics_address",
                                        "control_token_file",
                                        "tls_cert_file",
                                        "tls_key_file",
                                        "shm_prefix",
                                        "job_id",
                                        "peer_address",
                                        "peer_advertise_address",
                                        "leader_address",
                                        "job_token_file",
                                        "peer_tls_cert_file",
                                        "peer_tls_key_file",
                                        "peer_tls_ca_file",
                                        "peer_timeout_ms",
                                        "refresh_interval",
                                        "rank",
                                        "max_rank",
                                        "probe_interval",
                                        "sketch_rows",
                                        "staleness_limit",
                                        "beta",
                                        "full_beta",
                                        "full_max_d_in",
                                        "transform",
                                        "format",
                                        "omega_seed",
                                        "selection.kind",
                                        "selection.top_k",
                                        "selection.threshold",
                                        "selection.hysteresis",
                                        "selection.window_steps",
                                        "selection.max_layers",
                                        "selection.max_extra_flops",
                                        "selection.min_gain",
                                        "selection.entry_gain",
                                        "selection.entry_probes",
                                        "selection.gain_hold",
                                        "selection.warmup_steps",
                                        "selection.plan_interval_steps",
                                        "selection.audit_window",
                                        "selection.audit_margin",
                                        "refresh_threads",
                                        "refresher_device",
                                        "heartbeat_interval_ms",
                                        "rank_timeout_ms",
                                        "poll_interval_ms",
                                        "log_level"};

absl::StatusOr<DaemonConfig> Load(const std::string& yaml,
                                  std::vector<std::string> flags = {}) {
  return LoadConfigFromString(yaml, "giftd.yaml", flags);
}

// Expects INVALID_ARGUMENT with exactly `message`.
void ExpectError(const absl::StatusOr<DaemonConfig>& result,
                 const std::string& message) {
  ASSERT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(result.status().message(), message);
}

void ExpectSameConfig(const DaemonConfig& a, const DaemonConfig& b) {
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.agent_socket, b.agent_socket);
  EXPECT_EQ(a.control_address, b.control_address);
  EXPECT_EQ(a.metrics_address, b.metrics_address);
  EXPECT_EQ(a.control_token_file, b.control_token_file);
  EXPECT_EQ(a.tls_cert_file, b.tls_cert_file);
  EXPECT_EQ(a.tls_key_file, b.tls_key_file);
  EXPECT_EQ(a.shm_prefix, b.shm_prefix);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.peer_address, b.peer_address);
  EXPECT_EQ(a.peer_advertise_address, b.peer_advertise_address);
  EXPECT_EQ(a.leader_address, b.leader_address);
  EXPECT_EQ(a.job_token_file, b.job_token_file);
  EXPECT_EQ(a.peer_tls_cert_file, b.peer_tls_cert_file);
  EXPECT_EQ(a.peer_tls_key_file, b.peer_tls_key_file);
  EXPECT_EQ(a.peer_tls_ca_file, b.peer_tls_ca_file);
  EXPECT_EQ(a.peer_timeout_ms, b.peer_timeout_ms);
  EXPECT_EQ(a.refresh_interval, b.refresh_interval);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.max_rank, b.max_rank);
  EXPECT_EQ(a.probe_interval, b.probe_interval);
  EXPECT_EQ(a.sketch_rows, b.sketch_rows);
  EXPECT_EQ(a.staleness_limit, b.staleness_limit);
  EXPECT_EQ(a.beta, b.beta);  // exact: the printer round-trips doubles
  EXPECT_EQ(a.beta_auto, b.beta_auto);
  EXPECT_EQ(a.full_beta, b.full_beta);
  EXPECT_EQ(a.full_max_d_in, b.full_max_d_in);
  EXPECT_EQ(a.transform, b.transform);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.omega_seed, b.omega_seed);
  EXPECT_EQ(a.selection.kind, b.selection.kind);
  EXPECT_EQ(a.selection.top_k, b.selection.top_k);
  EXPECT_EQ(a.selection.threshold, b.selection.threshold);
  EXPECT_EQ(a.selection.hysteresis, b.selection.hysteresis);
  EXPECT_EQ(a.selection.window_steps, b.selection.window_steps);
  EXPECT_EQ(a.selection.max_layers, b.selection.max_layers);
  EXPECT_EQ(a.selection.max_extra_flops, b.selection.max_extra_flops);
  EXPECT_EQ(a.selection.min_gain, b.selection.min_gain);
  EXPECT_EQ(a.selection.entry_gain, b.selection.entry_gain);
  EXPECT_EQ(a.selection.entry_probes, b.selection.entry_probes);
  EXPECT_EQ(a.selection.gain_hold, b.selection.gain_hold);
  EXPECT_EQ(a.selection.warmup_steps, b.selection.warmup_steps);
  EXPECT_EQ(a.selection.plan_interval_steps, b.selection.plan_interval_steps);
  EXPECT_EQ(a.selection.audit_window, b.selection.audit_window);
  EXPECT_EQ(a.selection.audit_margin, b.selection.audit_margin);
  EXPECT_EQ(a.refresh_threads, b.refresh_threads);
  EXPECT_EQ(a.refresher_device, b.refresher_device);
  EXPECT_EQ(a.heartbeat_interval_ms, b.heartbeat_interval_ms);
  EXPECT_EQ(a.rank_timeout_ms, b.rank_timeout_ms);
  EXPECT_EQ(a.poll_interval_ms, b.poll_interval_ms);
  EXPECT_EQ(a.log_level, b.log_level);
}

TEST(ConfigTest, DefaultsAreValidAndMatchTheHeader) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(c->node, host);
  EXPECT_EQ(c->shm_prefix.rfind("/gift-", 0), 0u);
  EXPECT_EQ(c->control_address, "127.0.0.1:50151");
  EXPECT_EQ(c->refresh_interval, 25);
  EXPECT_EQ(c->rank, 32);
  EXPECT_EQ(c->selection.kind, SelectionKind::kTopK);
  EXPECT_EQ(c->selection.top_k, 8);
  EXPECT_FALSE(c->help);
  EXPECT_FALSE(c->print_config);
  EXPECT_OK(ValidateConfig(*c));
}

TEST(ConfigTest, EmptyYamlValueIsEmptyString) {
  absl::StatusOr<DaemonConfig> c = Load("metrics_address:\n");
  ASSERT_OK(c);
  EXPECT_EQ(c->metrics_address, "");
  ExpectError(Load("rank:\n"),
              "giftd.yaml:1: rank: expected an integer, got ''");
}

TEST(ConfigTest, ShmPrefixDefaultSanitizesTheNodeName) {
  absl::StatusOr<DaemonConfig> c = Load("node: \"gpu node/7:a\"\n");
  ASSERT_OK(c);
  EXPECT_EQ(c->shm_prefix, "/gift-gpu_node_7_a");
}

TEST(ConfigTest, FileThenFlagsOverride) {
  const std::string yaml =
      "refresh_interval: 20\n"
      "rank: 16\n"
      "transform: full\n"
      "selection:\n"
      "  kind: threshold\n"
      "  threshold: 0.2\n"
      "  top_k: 3\n";
  absl::StatusOr<DaemonConfig> c =
      Load(yaml, {"--refresh-interval=70", "--rank", "8", "--selection.top-k=4",
                  "--selection.kind", "elbow"});
  ASSERT_OK(c);
  EXPECT_EQ(c->refresh_interval, 70);  // flag wins
  EXPECT_EQ(c->rank, 8);
  EXPECT_EQ(c->transform, "full");  // file only
  EXPECT_EQ(c->selection.kind, SelectionKind::kElbow);
  EXPECT_EQ(c->selection.threshold, 0.2);
  EXPECT_EQ(c->selection.top_k, 4);
}

TEST(ConfigTest, FlagSpellings) {
  absl::StatusOr<DaemonConfig> c =
      Load("", {"--refresh_interval", "60", "--log-level=debug",
                "--selection.window_steps=7", "--omega-seed=0x10",
                "--print-config"});
  ASSERT_OK(c);
  EXPECT_EQ(c->refresh_interval, 60);
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->selection.window_steps, 7);
  EXPECT_EQ(c->omega_seed, 16u);
  EXPECT_TRUE(c->print_config);
}

TEST(ConfigTest, HelpSkipsValidation) {
  absl::StatusOr<DaemonConfig> c = Load("", {"--rank=0", "--help"});
  ASSERT_OK(c);
  EXPECT_TRUE(c->help);
}

TEST(ConfigTest, YamlErrorsNameFileAndLine) {
  ExpectError(Load("rank: 8\n\nrefresh_intervall: 3\n"),
              "giftd.yaml:3: unknown key 'refresh_intervall'");
  ExpectError(Load("selection:\n  top_k: 2\n  kindd: elbow\n"),
              "giftd.yaml:3: unknown key 'selection.kindd'");
  ExpectError(Load("rank: 8\nrank: abc\n"),
              "giftd.yaml:2: duplicate key 'rank'");
  ExpectError(Load("beta: 1\nrank: abc\n"),
              "giftd.yaml:2: rank: expected an integer, got 'abc'");
  ExpectError(Load("beta: [1, 2]\n"),
              "giftd.yaml:1: beta: expected a single value");
  ExpectError(Load("selection: 3\n"),
              "giftd.yaml:1: selection: expected a map");
  ExpectError(Load("- rank\n"), "giftd.yaml:1: expected a map of options");
  absl::StatusOr<DaemonConfig> bad = Load("rank: 8\nbeta: [1, 2\n");
  ASSERT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad.status().message(), HasSubstr("giftd.yaml:"));
}

TEST(ConfigTest, FlagErrors) {
  ExpectError(Load("", {"--rank=abc"}),
              "--rank: expected an integer, got 'abc'");
  ExpectError(Load("", {"--beta", "x"}),
              "--beta: expected a finite number, "
              "got 'x'");
  ExpectError(Load("", {"--beta=nan"}),
              "--beta: expected a finite number, got 'nan'");
  ExpectError(Load("", {"--omega-seed=-1"}),
              "--omega-seed: expected an unsigned 64-bit integer, got '-1'");
  ExpectError(Load("", {"--selection.kind=best"}),
              "--selection.kind: expected top-k, elbow or threshold, got "
              "'best'");
  ExpectError(Load("", {"--no-such=1"}), "unknown flag '--no-such'");
  ExpectError(Load("", {"--rank"}), "--rank: missing value");
  ExpectError(Load("", {"--rank", "--beta=1"}), "--rank: missing value");
  ExpectError(Load("", {"stray"}), "unexpected argument 'stray'");
  ExpectError(Load("", {"--config=x.yaml"}), "unknown flag '--config'");
  // Text options are UTF-8 (--print-config writes YAML, which is Unicode):
  // a raw byte would not read back (fuzz/regressions/config/).
  ExpectError(Load("", {"--node=ab\xff"}),
              "--node: expected UTF-8 text, got invalid byte 0xff at offset "
              "2");
  ExpectError(Load("", {"--node=\xc0\x80"}),  // overlong NUL
              "--node: expected UTF-8 text, got invalid byte 0xc0 at offset "
              "0");
  ExpectError(Load("", {"--node=\xed\xa0\x80"}),  // a surrogate
              "--node: expected UTF-8 text, got invalid byte 0xed at offset "
              "0");
  EXPECT_TRUE(Load("", {"--node=n\xc3\xb8"
                        "de-\xe2\x82\xac"})
                  .ok());
}

// A value that parses but fails a check names the flag as typed.
TEST(ConfigTest, RangeErrors) {
  ExpectError(Load("", {"--refresh-interval=0"}),
              "--refresh-interval: refresh_interval must be >= 1 (got 0)");
  ExpectError(Load("", {"--refresh_interval", "-3"}),
              "--refresh_interval: refresh_interval must be >= 1 (got -3)");
  ExpectError(Load("", {"--beta=0"}), "--beta: beta must be > 0 (got 0)");
  ExpectError(Load("", {"--heartbeat-interval-ms=5"}),
              "--heartbeat-interval-ms: heartbeat_interval_ms must be >= 10 "
              "(got 5)");
  ExpectError(Load("", {"--selection.top-k=0"}),
              "--selection.top-k: selection.top_k must be >= 1 (got 0)");
  ExpectError(Load("", {"--transform=diag"}),
              "--transform: transform must be one of lowrank|full (got "
              "'diag')");
  ExpectError(Load("", {"--format=e3m4"}),
              "--format: format must be one of e4m3|e5m2|nvfp4|mxfp4 (got "
              "'e3m4')");
  ExpectError(Load("", {"--log-level=loud"}),
              "--log-level: log_level must be one of debug|info|warning|error "
              "(got 'loud')");
  ExpectError(Load("", {"--rank=65"}),
              "--rank: rank must be <= max_rank (got 65 > 64)");
  ExpectError(Load("", {"--max-rank=16"}),
              "--max-rank: rank must be <= max_rank (got 32 > 16)");
  ExpectError(Load("", {"--rank-timeout-ms=1000"}),
              "--rank-timeout-ms: rank_timeout_ms must be > "
              "heartbeat_interval_ms (got 1000 <= 1000)");
  ExpectError(Load("", {"--control-address=127.0.0.1:99999"}),
              "--control-address: control_address: port must be a number in "
              "0..65535 (got '99999')");
  ExpectError(Load("", {"--agent-socket=gift.sock"}),
              "--agent-socket: agent_socket must be an absolute path of at "
              "most 107 bytes (got 'gift.sock')");
  ExpectError(Load("", {"--selection.hysteresis=1"}),
              "--selection.hysteresis: selection: selection.hysteresis must "
              "be in [0, 1) (got 1)");
  ExpectError(Load("", {"--selection.gain-hold=0.5"}),
              "--selection.gain-hold: selection.gain_hold must be >= 1 (got "
              "0.5)");
  ExpectError(Load("", {"--selection.gain-hold=2000"}),
              "--selection.gain-hold: selection: selection.gain_hold must be "
              "in [1, 1000] (got 2000)");
  ExpectError(Load("", {"--selection.warmup-steps=-1"}),
              "--selection.warmup-steps: selection.warmup_steps must be >= 0 "
              "(got -1)");
  ExpectError(Load("", {"--selection.plan-interval-steps=-5"}),
              "--selection.plan-interval-steps: selection.plan_interval_steps "
              "must be >= 0 (got -5)");
  ExpectError(Load("", {"--selection.audit-window=0"}),
              "--selection.audit-window: selection.audit_window must be >= 1 "
              "(got 0)");
  ExpectError(Load("", {"--selection.audit-window=1001"}),
              "--selection.audit-window: selection: selection.audit_window "
              "must be in [1, 1000] (got 1001)");
  ExpectError(Load("", {"--selection.audit-margin=11"}),
              "--selection.audit-margin: selection: selection.audit_margin "
              "must be in [0, 10] (got 11)");
}

// The plan-stability and audit policy fields, from the file and as flags.
TEST(ConfigTest, StabilityAndAuditFields) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  EXPECT_EQ(c->selection.gain_hold, 2);
  EXPECT_EQ(c->selection.warmup_steps, 100);
  EXPECT_EQ(c->selection.plan_interval_steps, 200);
  EXPECT_EQ(c->selection.audit_window, 3);
  EXPECT_EQ(c->selection.audit_margin, 0.1);
  c = Load(
      "selection:\n  gain_hold: 1.5\n  warmup_steps: 0\n"
      "  plan_interval_steps: 0\n  audit_window: 5\n",
      {"--selection.audit-margin=0.2", "--selection.warmup-steps=30"});
  ASSERT_OK(c);
  EXPECT_EQ(c->selection.gain_hold, 1.5);
  EXPECT_EQ(c->selection.warmup_steps, 30);
  EXPECT_EQ(c->selection.plan_interval_steps, 0);
  EXPECT_EQ(c->selection.audit_window, 5);
  EXPECT_EQ(c->selection.audit_margin, 0.2);
}

TEST(ConfigTest, CoordinatorReplacesTheLeaderAddress) {
  const std::string token = ::testing::TempDir() + "/coord-token";
  std::ofstream(token) << "t\n";
  const std::vector<std::string> peer = {
      "--job-id=j", "--peer-address=127.0.0.1:1", "--job-token-file=" + token};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = peer;
    args.insert(args.end(), more.begin(), more.end());
    return Load("", args);
  };
  absl::StatusOr<DaemonConfig> c = with(
      {"--coordinator=etcd://127.0.0.1:2379,h2:2379", "--coordinator-ttl-s=2"});
  ASSERT_OK(c);
  EXPECT_EQ(c->coordinator_ttl_s, 2);
  EXPECT_TRUE(c->leader_address.empty());
  ExpectError(with({"--coordinator=etcd://h:1", "--leader-address=h:2"}),
              "--leader-address: leader_address 'h:2' and coordinator "
              "together: with a coordinator the leader is elected");
  EXPECT_THAT(with({"--coordinator=http://h:1"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with({"--coordinator=etcd://h:1", "--coordinator-ttl-s=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(with({"--coordinator=etcd://h:1", "--coordinator-user=root"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Load("", {"--coordinator-user=root"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Load("", {"--coordinator=etcd://h:1"}),  // no peer_address
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Without a coordinator the static leader is still required.
  ExpectError(with({}),
              "--peer-address: leader_address is required with peer_address");
}

// The four wire formats by name (any case, kept in lower case), from the
// file and the flag.
TEST(ConfigTest, FormatTakesTheFourWireFormats) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  EXPECT_EQ(c->format, "e4m3");
  for (const char* name : {"e4m3", "e5m2", "nvfp4", "mxfp4"}) {
    c = Load(absl::StrCat("format: ", name, "\n"));
    ASSERT_OK(c);
    EXPECT_EQ(c->format, name);
  }
  c = Load("", {"--format=NVFP4"});
  ASSERT_OK(c);
  EXPECT_EQ(c->format, "nvfp4");
  ExpectError(Load("", {"--format=fp4"}),
              "--format: format must be one of e4m3|e5m2|nvfp4|mxfp4 (got "
              "'fp4')");
}

TEST(ConfigTest, BetaTakesANumberOrAuto) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  EXPECT_FALSE(c->beta_auto);
  c = Load("beta: auto\n");
  ASSERT_OK(c);
  EXPECT_TRUE(c->beta_auto);
  EXPECT_EQ(c->beta, 1.0);  // where auto starts
  EXPECT_THAT(FormatConfig(*c), HasSubstr("beta: auto\n"));
  absl::StatusOr<DaemonConfig> back = Load(FormatConfig(*c));
  ASSERT_OK(back);
  ExpectSameConfig(*c, *back);
  c = Load("beta: auto\n", {"--beta=2"});  // the flag wins
  ASSERT_OK(c);
  EXPECT_FALSE(c->beta_auto);
  EXPECT_EQ(c->beta, 2.0);
  c = Load("", {"--beta=auto"});
  ASSERT_OK(c);
  EXPECT_TRUE(c->beta_auto);
  ExpectError(Load("", {"--beta=automatic"}),
              "--beta: expected a finite number, got 'automatic'");
}

// Every check of a value from the file names file:line of its key (issue
// 13: these came without a location, after the file was read).
TEST(ConfigTest, YamlValidationErrorsNameFileAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"rank: 8\nformat: e9m9\n",
       "giftd.yaml:2: format must be one of e4m3|e5m2|nvfp4|mxfp4 (got "
       "'e9m9')"},
      {"# K\nrefresh_interval: -5\n",
       "giftd.yaml:2: refresh_interval must be >= 1 (got -5)"},
      {"rank: 8\ncontrol_address: 127.0.0.1:99999\n",
       "giftd.yaml:2: control_address: port must be a number in 0..65535 "
       "(got '99999')"},
      {"beta: 1\nrank: 80\n",
       "giftd.yaml:2: rank must be <= max_rank (got 80 > 64)"},
      {"beta: 1\n\nmax_rank: 16\n",
       "giftd.yaml:3: rank must be <= max_rank (got 32 > 16)"},
      {"rank: 8\nagent_socket: gift.sock\n",
       "giftd.yaml:2: agent_socket must be an absolute path of at most 107 "
       "bytes (got 'gift.sock')"},
      {"selection:\n  top_k: 2\n  hysteresis: 1.5\n",
       "giftd.yaml:3: selection: selection.hysteresis must be in [0, 1) (got "
       "1.5)"},
      {"selection:\n  top_k: 0\n",
       "giftd.yaml:2: selection.top_k must be >= 1 (got 0)"},
      {"rank: 8\nbeta: 0\n", "giftd.yaml:2: beta must be > 0 (got 0)"},
      {"heartbeat_interval_ms: 20000\n",
       "giftd.yaml:1: rank_timeout_ms must be > heartbeat_interval_ms (got "
       "10000 <= 20000)"},
      {"rank: 8\npoll_interval_ms: 20000\n",
       "giftd.yaml:2: peer_timeout_ms must be > poll_interval_ms (got 10000 "
       "<= 20000)"},
      {"rank: 8\ncontrol_address: 0.0.0.0:50151\n",
       "giftd.yaml:2: control_token_file is required when control_address is "
       "not loopback (got '0.0.0.0:50151')"},
      {"rank: 8\nmetrics_address: :9464\n",
       "giftd.yaml:2: metrics_address must be host:port, IPv6 hosts in "
       "brackets (got ':9464')"},
      {"rank: 8\ntls_key_file: /k.pem\n",
       "giftd.yaml:2: tls_cert_file and tls_key_file must be set together"},
      {"rank: 8\nshm_prefix: gift\n",
       "giftd.yaml:2: shm_prefix must be '/' and 1..127 characters without "
       "'/' (got 'gift')"},
      // The default shm_prefix comes from the node name.
      {"rank: 8\nnode: " + std::string(130, 'n') + "\n",
       "giftd.yaml:2: shm_prefix must be '/' and 1..127 characters without "
       "'/' (got '/gift-" +
           std::string(130, 'n') + "')"},
      {"rank: 8\npeer_address: 10.0.0.2:50152\n",
       "giftd.yaml:2: job_id is required with peer_address"},
      // Rows added to the option table get their location too.
      {"rank: 8\nmax_layers: 0\n",
       "giftd.yaml:2: max_layers must be >= 1 (got 0)"},
      {"rank: 8\nrefresh_interval: 2000000\n",
       "giftd.yaml:2: refresh_interval must be <= 1000000 (got 2000000)"},
      {"rank: 8\nlog_level: loud\n",
       "giftd.yaml:2: log_level must be one of debug|info|warning|error (got "
       "'loud')"},
  };
  for (const auto& [yaml, message] : cases) {
    ExpectError(Load(yaml), message);
  }
}

// A flag overrides the file's line; a check on an option only the file set
// still names the file.
TEST(ConfigTest, ValidationErrorsNameTheLastSource) {
  ExpectError(Load("rank: 16\n", {"--rank=100"}),
              "--rank: rank must be <= max_rank (got 100 > 64)");
  ExpectError(Load("rank: 40\n", {"--max-rank=16"}),
              "giftd.yaml:1: rank must be <= max_rank (got 40 > 16)");
  ExpectError(Load("beta: 1\nrefresh_interval: 0\n", {"--rank=8"}),
              "giftd.yaml:2: refresh_interval must be >= 1 (got 0)");
}

// ValidateConfig on a config built in code has no source to name.
TEST(ConfigTest, ValidateConfigOfAHandBuiltConfig) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  c->rank = 100;
  absl::Status s = ValidateConfig(*c);
  EXPECT_EQ(s.message(), "rank must be <= max_rank (got 100 > 64)");
  EXPECT_EQ(s, absl::InvalidArgumentError(s.message()));  // no payload
}

TEST(ConfigTest, SelectionPolicyIsValidatedBySelector) {
  // Upper bounds are SelectorPolicy::Validate's; the message is prefixed.
  absl::StatusOr<DaemonConfig> c = Load("", {"--selection.hysteresis=1"});
  ASSERT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(c.status().message(), HasSubstr("selection: "));
  c = Load("", {"--selection.threshold=1.5"});
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfigTest, EndpointErrors) {
  auto expect_bad = [](std::vector<std::string> flags, const char* what) {
    absl::StatusOr<DaemonConfig> c = Load("", flags);
    ASSERT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument)) << flags[0];
    EXPECT_THAT(c.status().message(), HasSubstr(what)) << flags[0];
  };
  expect_bad({"--control-address=localhost"}, "control_address must be");
  expect_bad({"--control-address=127.0.0.1:65536"}, "0..65535");
  expect_bad({"--control-address=127.0.0.1:http"}, "0..65535");
  expect_bad({"--control-address=::1:80"}, "IPv6 hosts in brackets");
  expect_bad({"--metrics-address=:9464"}, "metrics_address must be");
  expect_bad({"--agent-socket=gift.sock"}, "agent_socket");
  expect_bad({"--agent-socket=/" + std::string(120, 'a')}, "agent_socket");
  expect_bad({"--shm-prefix=gift"}, "shm_prefix");
  expect_bad({"--shm-prefix=/a/b"}, "shm_prefix");
  expect_bad({"--tls-cert-file=/c.pem"}, "tls_cert_file and tls_key_file");
  expect_bad({"--control-address=0.0.0.0:50151"}, "control_token_file");
  expect_bad({"--control-address=[::]:50151"}, "control_token_file");
  expect_bad({"--control-address=128.0.0.1:50151"}, "control_token_file");
  expect_bad({"--control-address=[]:50151"}, "control_address must be");
}

TEST(ConfigTest, EndpointsAccepted) {
  EXPECT_OK(Load("", {"--metrics-address="}));  // disabled
  EXPECT_OK(Load("", {"--control-address=[::1]:0"}));
  EXPECT_OK(Load("", {"--control-address=localhost:50151"}));
  // Loopback as the Control server sees it (net::IsLoopbackHost): all of
  // 127.0.0.0/8 and any spelling of ::1 need no token.
  EXPECT_OK(Load("", {"--control-address=127.0.0.2:50151"}));
  EXPECT_OK(Load("", {"--control-address=[0:0:0:0:0:0:0:1]:50151"}));
  EXPECT_OK(Load("", {"--control-address=0.0.0.0:50151",
                      "--control-token-file=/etc/gift/token",
                      "--tls-cert-file=/c.pem", "--tls-key-file=/k.pem"}));
}

TEST(ConfigTest, PrintConfigRoundTrips) {
  absl::StatusOr<DaemonConfig> c =
      Load("node: \"n \\\"1\\\"\"\ncontrol_token_file: \"\"\n",
           {"--beta=0.1", "--full-beta=1e-7", "--selection.kind=threshold",
            "--selection.threshold=0.3", "--selection.max-extra-flops=1.5e12",
            "--omega-seed=18446744073709551615", "--refresher-device=0",
            "--agent-socket=/tmp/a b/agent.sock", "--format=e5m2"});
  ASSERT_OK(c);
  EXPECT_EQ(c->node, "n \"1\"");
  std::string yaml = FormatConfig(*c);
  absl::StatusOr<DaemonConfig> back = Load(yaml);
  ASSERT_OK(back) << yaml;
  ExpectSameConfig(*c, *back);
  EXPECT_EQ(FormatConfig(*back), yaml);
  // The defaults round-trip too.
  absl::StatusOr<DaemonConfig> d = Load("");
  ASSERT_OK(d);
  absl::StatusOr<DaemonConfig> d2 = Load(FormatConfig(*d));
  ASSERT_OK(d2);
  ExpectSameConfig(*d, *d2);
}

TEST(ConfigTest, HelpPrintConfigAndMarkdownListEveryOption) {
  absl::StatusOr<DaemonConfig> c = Load("");
  ASSERT_OK(c);
  const std::string help = ConfigHelp();
  const std::string yaml = FormatConfig(*c);
  const std::string md = ConfigMarkdown();
  for (const std::string& key : kKeys) {
    std::string flag = "--" + key;
    for (char& ch : flag) ch = ch == '_' ? '-' : ch;
    EXPECT_THAT(help, HasSubstr(flag + "=")) << key;
    EXPECT_THAT(md, HasSubstr("`" + key + "`")) << key;
    std::string leaf = key.substr(key.find('.') + 1);  // npos + 1 == 0
    EXPECT_THAT(yaml, HasSubstr("\n" + std::string(key == leaf ? "" : "  ") +
                                leaf + ": "))
        << key;
  }
  EXPECT_THAT(help, HasSubstr("--refresh-interval=INT (default: 25)"));
  EXPECT_THAT(yaml, HasSubstr("(default: 25)\nrefresh_interval: 25\n"));
  EXPECT_THAT(yaml, HasSubstr("selection:\n  # "));
  EXPECT_THAT(md, HasSubstr("| `rank` | `--rank=INT` | `32` |"));
  // A '|' inside a cell would split it, even in a code span.
  EXPECT_THAT(md, HasSubstr("`--transform=lowrank\\|full`"));
}

// A file on disk, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/giftd_config_test_XXXXXX";
    int fd = mkstemp(tmpl);
    path_ = tmpl;
    EXPECT_EQ(write(fd, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::StatusOr<DaemonConfig> LoadArgv(std::vector<std::string> args) {
  std::vector<const char*> argv = {"giftd"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return LoadConfig(static_cast<int>(argv.size()), argv.data());
}

// A follower's peer flags with `token_file`.
std::vector<std::string> PeerFlags(const std::string& token_file) {
  return {"--job-id=llama", "--peer-address=10.0.0.2:50152",
          "--leader-address=10.0.0.1:50152", "--job-token-file=" + token_file};
}

TEST(ConfigTest, PeerOptionsAccepted) {
  TempFile token("s3cret\n");
  absl::StatusOr<DaemonConfig> c = Load("", PeerFlags(token.path()));
  ASSERT_OK(c);
  EXPECT_EQ(c->job_id, "llama");
  EXPECT_EQ(c->peer_timeout_ms, 10000);
  std::vector<std::string> flags = PeerFlags(token.path());
  flags.push_back("--peer-address=0.0.0.0:50152");
  flags.push_back("--peer-advertise-address=node2:50152");
  flags.push_back("--peer-tls-cert-file=/c.pem");
  flags.push_back("--peer-tls-key-file=/k.pem");
  flags.push_back("--peer-tls-ca-file=/ca.pem");
  flags.push_back("--peer-timeout-ms=101");
  c = Load("", flags);
  ASSERT_OK(c);
  absl::StatusOr<DaemonConfig> back = Load(FormatConfig(*c));
  ASSERT_OK(back);
  ExpectSameConfig(*c, *back);
  // Without peer_address the others are not needed (a one-node giftd).
  EXPECT_OK(Load("", {"--job-id=llama"}));
}

TEST(ConfigTest, PeerOptionErrors) {
  TempFile token("s3cret");
  TempFile blank(" \n");
  auto with = [&token](std::vector<std::string> extra) {
    std::vector<std::string> flags = PeerFlags(token.path());
    flags.insert(flags.end(), extra.begin(), extra.end());
    return Load("", flags);
  };
  ExpectError(Load("", {"--peer-address=10.0.0.2:50152"}),
              "--peer-address: job_id is required with peer_address");
  ExpectError(with({"--leader-address="}),
              "--leader-address: leader_address is required with "
              "peer_address");
  ExpectError(with({"--job-token-file="}),
              "--job-token-file: job_token_file is required with "
              "peer_address");
  ExpectError(with({"--job-token-file=/nonexistent/token"}),
              "--job-token-file: cannot read job_token_file "
              "'/nonexistent/token': No such file or directory");
  ExpectError(
      with({"--job-token-file=" + blank.path()}),
      "--job-token-file: job_token_file '" + blank.path() + "' is empty");
  ExpectError(with({"--job-token-file=/dev/zero"}),
              "--job-token-file: cannot read job_token_file '/dev/zero': not "
              "a regular file");
  ExpectError(with({"--peer-address=10.0.0.2"}),
              "--peer-address: peer_address must be host:port, IPv6 hosts in "
              "brackets (got '10.0.0.2')");
  ExpectError(with({"--leader-address=10.0.0.1:x"}),
              "--leader-address: leader_address: port must be a number in "
              "0..65535 (got 'x')");
  ExpectError(with({"--peer-address=0.0.0.0:50152"}),
              "--peer-address: peer_advertise_address is required when "
              "peer_address is a wildcard address (got '0.0.0.0:50152')");
  ExpectError(with({"--peer-tls-cert-file=/c.pem"}),
              "--peer-tls-cert-file: peer_tls_cert_file and peer_tls_key_file "
              "must be set together");
  ExpectError(
      with({"--peer-tls-cert-file=/c.pem", "--peer-tls-key-file=/k.pem"}),
      "--peer-tls-cert-file: peer_tls_ca_file is required with peer TLS");
  ExpectError(Load("", {"--peer-timeout-ms=100"}),
              "--peer-timeout-ms: peer_timeout_ms must be > poll_interval_ms "
              "(got 100 <= 100)");
  ExpectError(Load("", {"--peer-timeout-ms=0"}),
              "--peer-timeout-ms: peer_timeout_ms must be >= 1 (got 0)");
}

TEST(ConfigTest, LoadConfigReadsTheFileFirstWhereverItStands) {
  TempFile file("rank: 16\nrefresh_interval: 20\n");
  absl::StatusOr<DaemonConfig> c =
      LoadArgv({"--rank=8", "--config", file.path()});
  ASSERT_OK(c);
  EXPECT_EQ(c->rank, 8);  // the flag overrides the file despite its position
  EXPECT_EQ(c->refresh_interval, 20);
  c = LoadArgv({"--config=" + file.path()});
  ASSERT_OK(c);
  EXPECT_EQ(c->rank, 16);
}

TEST(ConfigTest, LoadConfigFileErrors) {
  ExpectError(LoadArgv({"--config", "/nonexistent/giftd.yaml"}),
              "cannot read config file '/nonexistent/giftd.yaml': No such "
              "file or directory");
  ExpectError(LoadArgv({"--config"}), "--config: missing value");
  TempFile file("rank: 8\nsketch_rows: -3\n");
  ExpectError(LoadArgv({"--config", file.path(), "--config", file.path()}),
              "--config given more than once");
  // Values from the file are checked like flags, after the flags applied.
  ExpectError(LoadArgv({"--config", file.path()}),
              file.path() + ":2: sketch_rows must be >= 1 (got -3)");
  EXPECT_OK(LoadArgv({"--config", file.path(), "--sketch-rows=4"}));
  TempFile typo("rank: 8\n# comment\nrefresh_intervall: 3\n");
  absl::StatusOr<DaemonConfig> c = LoadArgv({"--config", typo.path()});
  ExpectError(c, typo.path() + ":3: unknown key 'refresh_intervall'");
}

// Only a regular file of at most 1 MiB is read: a device, a FIFO or a
// directory is refused before any read (no endless read, no wait for a
// writer, no "out of memory").
TEST(ConfigTest, ConfigFileMustBeABoundedRegularFile) {
  ExpectError(LoadArgv({"--config", "/dev/zero"}),
              "cannot read config file '/dev/zero': not a regular file");
  gift::testing::TempDir tmp("giftd_config_dir");
  ASSERT_TRUE(tmp.ok());
  const std::string dir = tmp.path();
  ExpectError(
      LoadArgv({"--config", dir}),
      std::string("cannot read config file '") + dir + "': not a regular file");
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectError(LoadArgv({"--config", fifo}),
              "cannot read config file '" + fifo + "': not a regular file");
  unlink(fifo.c_str());
  TempFile big(std::string((1 << 20) + 1, '#'));
  ExpectError(LoadArgv({"--config", big.path()}),
              "cannot read config file '" + big.path() +
                  "': 1048577 bytes, more than the 1048576 allowed");
  TempFile fits("# " + std::string((1 << 20) - 3, '-') + "\n");
  EXPECT_OK(LoadArgv({"--config", fits.path()}));
}

}  // namespace
}  // namespace gift::daemon

namespace gift::daemon {
namespace {

// The README's option table is generated by `giftd --help-markdown`; it
// must not drift from the code.
TEST(ConfigTest, ReadmeListsEveryOptionAsGenerated) {
  std::ifstream in(GIFT_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in.good()) << "cannot read " GIFT_SOURCE_DIR "/README.md";
  const std::string readme((std::istreambuf_iterator<char>(in)), {});
  auto c = LoadConfigFromString("", "", {"--help-markdown"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->help_markdown);
  std::istringstream table(ConfigMarkdown());
  for (std::string row; std::getline(table, row);) {
    EXPECT_NE(readme.find(row), std::string::npos)
        << "README.md lacks the row (regenerate it with giftd "
           "--help-markdown):\n"
        << row;
  }
}

}  // namespace
}  // namespace gift::daemon
