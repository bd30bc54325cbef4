// giftd end to end (issue 4): the real giftd and giftctl binaries and rank
// processes (rank_worker.cc) that feed the committed real gradients and
// activations through AllReduceEngine + GiftdConnection over Gloo.
// Every test starts its own giftd on free ports with its own shm prefix.
//
// Conditions are polled with deadlines; nothing asserts wall-clock time.
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/giftd_fixture.h"
#include "tests/daemon/json_fields.h"

namespace gift::testing_daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr char kSpiky[] = "synthetic.spiky";

class GiftdIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = MakeTempDir("giftd_it");
    ASSERT_OK(dir);
    dir_ = *dir;
  }

  void TearDown() override { CleanUpRun(HasFailure(), dir_, &giftd_, &ranks_); }

  void StartGiftd(const GiftdConfig& config = {}) {
    absl::StatusOr<std::unique_ptr<Giftd>> d =
        Giftd::Start(GIFT_GIFTD_BIN, GIFT_GIFTCTL_BIN, dir_, config);
    ASSERT_OK(d);
    giftd_ = *std::move(d);
  }

  void StartRanks(const std::string& job, int world_size = 4) {
    RankOptions options;
    options.job = job;
    options.world_size = world_size;
    absl::StatusOr<std::unique_ptr<RankGroup>> g = RankGroup::Start(
        GIFT_RANK_WORKER_BIN, dir_, giftd_->agent_socket(), options);
    ASSERT_OK(g);
    ranks_ = *std::move(g);
  }

  // giftctl layers, by name ({} when the call fails).
  std::map<std::string, json> Layers() {
    std::map<std::string, json> out;
    absl::StatusOr<json> j = giftd_->CtlJson({"layers"});
    if (!j.ok()) return out;
    for (const json& l : Field(*j, "layers")) out[Str(l, "name")] = l;
    return out;
  }

  json Status() {
    absl::StatusOr<json> j = giftd_->CtlJson({"status"});
    EXPECT_OK(j);
    return j.ok() ? *j : json::object();
  }

  static std::string LayerPath(const json& line, const std::string& layer) {
    return line["layers"][layer]["path"].get<std::string>();
  }

  static bool RealLayersOnPath(const json& line, const std::string& path) {
    for (const std::string& l : kRealLayers) {
      if (LayerPath(line, l) != path) return false;
    }
    return true;
  }

  void WaitForSteps(int64_t steps) {
    ASSERT_TRUE(
        WaitFor([&] { return ranks_->MinSteps() >= steps; }, absl::Seconds(60)))
        << "ranks reached " << ranks_->MinSteps() << " steps, want " << steps;
  }

  std::string dir_;
  std::unique_ptr<Giftd> giftd_;
  std::unique_ptr<RankGroup> ranks_;
};

TEST_F(GiftdIntegrationTest, SelectsTheLayersWithMeasuredGain) {
  StartGiftd();
  StartRanks("select");
  std::map<std::string, json> layers;
  auto converged = [&] {
    layers = Layers();
    if (layers.size() != 5) return false;
    for (const std::string& l : kRealLayers) {
      if (!Bool(layers[l], "selected") || Num(layers[l], "gain") < 0.05) {
        return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(WaitFor(converged, absl::Seconds(60), absl::Milliseconds(300)))
      << "layers: " << json(layers).dump(1);
  const json& spiky = layers[kSpiky];
  EXPECT_TRUE(Bool(spiky, "candidate")) << spiky.dump();
  EXPECT_FALSE(Bool(spiky, "selected")) << spiky.dump();
  EXPECT_THAT(Str(spiky, "reason"), HasSubstr("gain")) << spiky.dump();
  // The spiky layer is the most vulnerable one (FP8 underflows), which is
  // exactly why the gain guard, not the score, must keep it out.
  for (const std::string& l : kRealLayers) {
    EXPECT_GT(Num(spiky, "vulnerability"), Num(layers[l], "vulnerability"))
        << l;
  }
  // The ranks follow the plan.
  EXPECT_OK(ranks_->WaitForAll(
      [](const json& line) {
        return RealLayersOnPath(line, "gift") &&
               LayerPath(line, kSpiky) == "euclid";
      },
      absl::Seconds(30)));

  absl::StatusOr<std::string> metrics = giftd_->Metrics();
  ASSERT_OK(metrics);
  for (const char* name :
       {"gift_layer_selected", "gift_factor_version", "gift_bytes_sent_total",
        "gift_ranks_registered", "gift_layer_gain", "gift_plan_epoch"}) {
    EXPECT_THAT(*metrics, HasSubstr(name));
  }
  EXPECT_THAT(*metrics, HasSubstr("layer=\"blocks.0.mlp.fc2\""));
  // giftd's instance id has a label of its own: "instance" is Prometheus'
  // target label (a clash renames ours to exported_instance).
  EXPECT_THAT(*metrics, HasSubstr("gift_daemon_info{"));
  EXPECT_THAT(*metrics, HasSubstr("daemon_instance=\""));
  EXPECT_THAT(*metrics, Not(HasSubstr(",instance=\"")));
  EXPECT_THAT(*metrics, Not(HasSubstr("{instance=\"")));
  const std::string promtool = FindOnPath("promtool");
  if (!promtool.empty()) {
    const std::string scrape = dir_ + "/scrape.txt";
    std::ofstream(scrape) << *metrics;
    absl::StatusOr<CommandResult> check = testing_daemon::Run(
        {"/bin/sh", "-c", absl::StrCat(promtool, " check metrics < ", scrape)});
    ASSERT_OK(check);
    EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
    EXPECT_EQ(check->out + check->err, "");
  } else {
    std::cerr << "promtool not found: lint sub-check skipped\n";
  }
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
}

TEST_F(GiftdIntegrationTest, SetIntervalSwitchesEveryRankAtTheSameStep) {
  StartGiftd();
  StartRanks("interval");
  ASSERT_OK(ranks_->WaitForAll(
      [](const json& l) { return l["attached"] == true; }, absl::Seconds(60)));
  WaitForSteps(10);
  absl::StatusOr<json> set = giftd_->CtlJson({"set-interval", "7"});
  ASSERT_OK(set);
  const int64_t epoch = Int(*set, "plan_epoch");
  ASSERT_GT(epoch, 1) << set->dump();
  ASSERT_OK(ranks_->WaitForAll(
      [&](const json& l) { return l["epoch"].get<int64_t>() >= epoch; },
      absl::Seconds(60)));
  WaitForSteps(ranks_->MinSteps() + 10);
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));

  // Every step that all ranks reported ran on one epoch on all of them, and
  // the new epoch began at the same step everywhere.
  std::vector<std::vector<json>> reps;
  for (int r = 0; r < ranks_->world_size(); ++r)
    reps.push_back(ranks_->Report(r));
  size_t common = reps[0].size();
  for (const auto& rep : reps) common = std::min(common, rep.size());
  std::set<int64_t> switch_steps;
  for (int r = 0; r < ranks_->world_size(); ++r) {
    int64_t first = -1;
    for (size_t s = 0; s < common; ++s) {
      const json& line = reps[r][s];
      ASSERT_EQ(line["step"], s);
      ASSERT_EQ(line["epoch"], reps[0][s]["epoch"])
          << "rank " << r << " step " << s;
      if (first < 0 && line["epoch"].get<int64_t>() >= epoch) first = s;
      if (first >= 0 && line["epoch"].get<int64_t>() >= epoch) {
        EXPECT_EQ(line["refresh_interval"], 7) << line.dump();
      }
    }
    ASSERT_GE(first, 0) << "rank " << r << " never switched";
    // The attachment saw the switch where the allreduce made it.
    EXPECT_EQ(reps[r][first]["epoch_switch_step"], first) << "rank " << r;
    switch_steps.insert(first);
  }
  EXPECT_EQ(switch_steps.size(), 1u);
  EXPECT_EQ(Int(Status(), "refresh_interval"), 7);
}

TEST_F(GiftdIntegrationTest, PinForcesALayerOntoTheGiftPath) {
  StartGiftd();
  StartRanks("pin");
  WaitForSteps(5);
  absl::StatusOr<CommandResult> pin = giftd_->Ctl({"pin", kSpiky});
  ASSERT_OK(pin);
  ASSERT_EQ(pin->exit_code, 0) << pin->err;
  std::map<std::string, json> layers;
  ASSERT_TRUE(WaitFor(
      [&] {
        layers = Layers();
        return Bool(layers[kSpiky], "selected");
      },
      absl::Seconds(60), absl::Milliseconds(300)))
      << json(layers).dump(1);
  EXPECT_THAT(Str(layers[kSpiky], "reason"), HasSubstr("pin"));
  EXPECT_OK(ranks_->WaitForAll(
      [](const json& l) { return LayerPath(l, kSpiky) == "gift"; },
      absl::Seconds(60)));
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
}

TEST_F(GiftdIntegrationTest,
       RanksSurviveGiftdDeathAndARestartedGiftdIsAdopted) {
  GiftdConfig config;
  config.staleness_limit = 40;
  StartGiftd(config);
  StartRanks("restart");
  ASSERT_OK(ranks_->WaitForAll(
      [](const json& l) { return RealLayersOnPath(l, "gift"); },
      absl::Seconds(60)));

  ASSERT_OK(giftd_->Kill(SIGKILL));
  const int64_t killed_at = ranks_->MinSteps();
  // The ranks keep stepping, and once the factors are older than the
  // staleness limit every rank is back on the Euclidean path.
  ASSERT_OK(ranks_->WaitForAll(
      [](const json& l) {
        if (!RealLayersOnPath(l, "euclid")) return false;
        for (const std::string& name : kRealLayers) {
          if (l["layers"][name]["version"] != -1) return false;
        }
        return true;
      },
      absl::Seconds(60)));
  EXPECT_GE(ranks_->MinSteps(), killed_at + 20);
  for (int r = 0; r < ranks_->world_size(); ++r) {
    EXPECT_TRUE(ranks_->process(r).Running()) << "rank " << r;
    EXPECT_EQ(ranks_->Report(r).back()["attached"], false);
  }

  ASSERT_OK(giftd_->Restart());
  EXPECT_OK(ranks_->WaitForAll(
      [](const json& l) {
        return l["attaches"] == 2 && RealLayersOnPath(l, "gift");
      },
      absl::Seconds(60)));
  EXPECT_EQ(Int(Status(), "ranks_registered"), 4);
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
  // The new giftd continued above the epochs the ranks held: no rank ever
  // went back to an older plan.
  for (int r = 0; r < ranks_->world_size(); ++r) {
    int64_t last = 0;
    for (const json& l : ranks_->Report(r)) {
      ASSERT_GE(l["epoch"].get<int64_t>(), last) << "rank " << r << " " << l;
      last = l["epoch"].get<int64_t>();
    }
  }
}

TEST_F(GiftdIntegrationTest, AKilledRankIsReapedAndItsSharedMemoryFreed) {
  StartGiftd();
  StartRanks("solo", 1);
  ASSERT_OK(ranks_->WaitForAll(
      [](const json& l) { return l["attached"] == true; }, absl::Seconds(60)));
  ASSERT_EQ(Int(Status(), "ranks_registered"), 1);
  ASSERT_FALSE(ShmObjects(giftd_->shm_name_prefix()).empty())
      << "no /dev/shm objects under " << giftd_->shm_name_prefix();

  ASSERT_OK(ranks_->process(0).Signal(SIGKILL));
  ASSERT_OK(ranks_->process(0).Wait(absl::Seconds(10)));
  json status;
  EXPECT_TRUE(WaitFor(
      [&] {
        status = Status();
        return Int(status, "ranks_registered") == 0 &&
               Int(status, "ranks_reaped") == 1;
      },
      absl::Seconds(20), absl::Milliseconds(200)))
      << status.dump();
  EXPECT_THAT(ShmObjects(giftd_->shm_name_prefix()), ::testing::IsEmpty());
}

// Issue 13: a second giftd with the same shm prefix removed the running
// one's shared memory (its "stale objects" cleanup) before it failed on the
// agent socket. Now it checks the socket and takes the prefix's lock before
// it touches any shared memory, and exits with a clear error.
TEST_F(GiftdIntegrationTest, ASecondGiftdLeavesTheFirstOnesSharedMemoryAlone) {
  StartGiftd();
  StartRanks("solo", 1);
  ASSERT_OK(ranks_->WaitForAll(
      [](const json& l) { return l["attached"] == true; }, absl::Seconds(60)));
  const std::map<std::string, uint64_t> before =
      ShmObjects(giftd_->shm_name_prefix());
  ASSERT_FALSE(before.empty());

  // The same configuration: socket and prefix in use.
  absl::StatusOr<CommandResult> same =
      testing_daemon::Run({GIFT_GIFTD_BIN, "--config", giftd_->config_path()},
                          {}, absl::Seconds(15));
  ASSERT_OK(same);
  EXPECT_EQ(same->exit_code, 1) << same->err;
  EXPECT_THAT(same->err, HasSubstr("agent_socket")) << same->err;
  EXPECT_EQ(ShmObjects(giftd_->shm_name_prefix()), before);

  // Its own socket and ports, the same prefix: the prefix is in use.
  absl::StatusOr<int> control = FreePort(), metrics = FreePort();
  ASSERT_OK(control);
  ASSERT_OK(metrics);
  absl::StatusOr<CommandResult> prefix = testing_daemon::Run(
      {GIFT_GIFTD_BIN, "--config", giftd_->config_path(),
       "--agent-socket=" + dir_ + "/second.sock",
       absl::StrCat("--control-address=127.0.0.1:", *control),
       absl::StrCat("--metrics-address=127.0.0.1:", *metrics)},
      {}, absl::Seconds(15));
  ASSERT_OK(prefix);
  EXPECT_EQ(prefix->exit_code, 1) << prefix->err;
  EXPECT_THAT(prefix->err, HasSubstr("shm_prefix")) << prefix->err;
  EXPECT_THAT(prefix->err, HasSubstr("in use by another giftd")) << prefix->err;
  EXPECT_EQ(ShmObjects(giftd_->shm_name_prefix()), before);

  // The first one goes on serving its rank.
  EXPECT_EQ(Int(Status(), "ranks_registered"), 1);
  const int64_t steps = ranks_->MinSteps();
  WaitForSteps(steps + 5);
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
}

// Rejected with exit 1, INVALID_ARGUMENT and a reason.
void ExpectRejected(const Giftd& d, const std::vector<std::string>& args) {
  absl::StatusOr<CommandResult> r = d.Ctl(args);
  ASSERT_OK(r);
  const std::string what = absl::StrJoin(args, " ");
  EXPECT_EQ(r->exit_code, 1) << what << ": " << r->out << r->err;
  EXPECT_THAT(r->err, HasSubstr("INVALID_ARGUMENT")) << what;
  // More than the code: the message says what was wrong.
  EXPECT_GT(r->err.size(), std::string("INVALID_ARGUMENT").size() + 10)
      << what << ": " << r->err;
}

json OperatorState(const json& status, const std::map<std::string, json>& l) {
  json s = {{"refresh_interval", Int(status, "refresh_interval")},
            {"rank", Int(status, "rank")},
            {"policy", Field(status, "policy")}};
  for (const auto& [name, layer] : l) s[name] = Field(layer, "settings");
  return s;
}

TEST_F(GiftdIntegrationTest, BadRequestsAreRejectedAndChangeNothing) {
  StartGiftd();
  StartRanks("bad", 1);
  ASSERT_TRUE(WaitFor([&] { return Layers().size() == 5; }, absl::Seconds(60),
                      absl::Milliseconds(200)));
  const json before = OperatorState(Status(), Layers());
  // Values only giftd can judge: INVALID_ARGUMENT from the daemon.
  ExpectRejected(*giftd_, {"set-rank", "100000"});
  ExpectRejected(*giftd_, {"pin", "no.such.layer"});
  ExpectRejected(*giftd_, {"layer", "blocks.0.mlp.fc2", "--rank=100000"});
  // Values out of every range: giftctl refuses them before any call.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"set-interval", "0"},
        std::vector<std::string>{"layer", "blocks.0.mlp.fc2", "--beta=-1"}}) {
    absl::StatusOr<CommandResult> r = giftd_->Ctl(args);
    ASSERT_OK(r);
    EXPECT_EQ(r->exit_code, 2) << absl::StrJoin(args, " ") << ": " << r->err;
  }
  absl::StatusOr<CommandResult> unknown = giftd_->Ctl({"pin", "no.such.layer"});
  ASSERT_OK(unknown);
  EXPECT_THAT(unknown->err, HasSubstr("no.such.layer"));
  EXPECT_EQ(OperatorState(Status(), Layers()), before);
  ASSERT_OK(ranks_->Stop(absl::Seconds(30)));
}

// giftd --config FILE: exit 2 and FILE:LINE in the message.
void ExpectBadConfig(const std::string& dir, const std::string& name,
                     const std::string& yaml, const std::string& want) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << yaml;
  absl::StatusOr<CommandResult> r = Run({GIFT_GIFTD_BIN, "--config", path});
  ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_TRUE(std::regex_search(r->err, std::regex(want))) << r->err;
}

TEST_F(GiftdIntegrationTest, BadConfigFilesAreRejectedWithFileAndLine) {
  ExpectBadConfig(dir_, "malformed.yaml", "rank: 8\nbeta: [1, 2\n",
                  "malformed\\.yaml:[0-9]+:");
  ExpectBadConfig(dir_, "unknown.yaml", "rank: 8\nrefresh_intervall: 5\n",
                  "unknown\\.yaml:2: unknown key 'refresh_intervall'");
}

}  // namespace
}  // namespace gift::testing_daemon
