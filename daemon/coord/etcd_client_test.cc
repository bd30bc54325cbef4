#include "daemon/coord/etcd_client.h"

#include <atomic>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "daemon/coord/test_etcd.h"
#include "daemon/coord/test_net.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon::coord {
namespace {

using ::gift::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseCoordinatorTest, Endpoints) {
  auto e = ParseCoordinator("etcd://h1:2379,10.0.0.2:2380");
  ASSERT_OK(e);
  EXPECT_THAT(*e, ElementsAre("http://h1:2379", "http://10.0.0.2:2380"));
  e = ParseCoordinator("etcds://[::1]:2379");
  ASSERT_OK(e);
  EXPECT_THAT(*e, ElementsAre("https://[::1]:2379"));
}

TEST(ParseCoordinatorTest, Errors) {
  for (const char* bad :
       {"", "etcd:/h:1", "http://h:1", "etcd://", "etcd://h",
        "etcd://h:", "etcd://h:0", "etcd://h:65536", "etcd://h:x",
        "etcd://:2379", "etcd://h:1,", "etcd://h:1,,h:2", "etcd://h:1/path",
        "etcd://h h:1", "etcd://user@h:1", "etcd://[::1:1"}) {
    EXPECT_THAT(
        ParseCoordinator(bad),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("coordinator")))
        << bad;
  }
}

TEST(EtcdClientTest, BadOptions) {
  EXPECT_THAT(
      EtcdClient::Create({}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("endpoints")));
  EtcdOptions o;
  o.endpoints = {"ftp://h:1"};
  EXPECT_THAT(EtcdClient::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument));
  o.endpoints = {"http://127.0.0.1:1"};
  o.password = "pw";
  EXPECT_THAT(EtcdClient::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EtcdClientTest, UnreachableNamesTheEndpoints) {
  auto p1 = FreePort();
  auto p2 = FreePort();
  ASSERT_OK(p1);
  ASSERT_OK(p2);
  EtcdOptions o;
  o.endpoints = {absl::StrCat("http://127.0.0.1:", *p1),
                 absl::StrCat("http://127.0.0.1:", *p2)};
  EXPECT_THAT(
      EtcdClient::Create(o),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr(o.endpoints[0]), HasSubstr(o.endpoints[1]))));
}

class RealEtcdTest : public TestEtcdTest {
 protected:
  std::unique_ptr<EtcdClient> Client(const std::string& user = "",
                                     const std::string& password = "") {
    EtcdOptions o;
    o.endpoints = {etcd_->endpoint()};
    o.user = user;
    o.password = password;
    auto c = EtcdClient::Create(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }
};

TEST_F(RealEtcdTest, PutGetPrefixDelete) {
  auto c = Client();
  ASSERT_NE(c, nullptr);
  auto missing = c->Get("/t/none");
  ASSERT_OK(missing);
  EXPECT_FALSE(missing->has_value());
  const std::string binary("v\0\xff\n", 4);
  auto r1 = c->Put("/t/a", binary);
  ASSERT_OK(r1);
  auto r2 = c->Put("/t/b", "2");
  ASSERT_OK(r2);
  EXPECT_GT(*r2, *r1);
  ASSERT_OK(c->Put("/u", "outside"));
  auto a = c->Get("/t/a");
  ASSERT_OK(a);
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->value, binary);
  EXPECT_EQ((*a)->create_revision, *r1);
  EXPECT_EQ((*a)->mod_revision, *r1);
  ASSERT_OK(c->Put("/t/a", "again"));
  a = c->Get("/t/a");
  ASSERT_OK(a);
  EXPECT_EQ((*a)->create_revision, *r1);
  EXPECT_GT((*a)->mod_revision, *r2);
  EXPECT_EQ((*a)->version, 2);
  auto all = c->GetPrefix("/t/");
  ASSERT_OK(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "/t/a");
  EXPECT_EQ((*all)[1].key, "/t/b");
  EXPECT_EQ(*c->Delete("/t/a"), 1);
  EXPECT_EQ(*c->Delete("/t/a"), 0);
  EXPECT_EQ(c->GetPrefix("/t/")->size(), 1u);
}

TEST_F(RealEtcdTest, CreateIfAbsentAndLeases) {
  auto c = Client();
  ASSERT_NE(c, nullptr);
  auto l1 = c->LeaseGrant(absl::Seconds(5));
  auto l2 = c->LeaseGrant(absl::Seconds(5));
  ASSERT_OK(l1);
  ASSERT_OK(l2);
  EXPECT_NE(*l1, *l2);
  auto first = c->CreateIfAbsent("/job/leader", "one", *l1);
  ASSERT_OK(first);
  EXPECT_TRUE(first->succeeded);
  ASSERT_TRUE(first->holder.has_value());
  EXPECT_EQ(first->holder->create_revision, first->revision);
  auto second = c->CreateIfAbsent("/job/leader", "two", *l2);
  ASSERT_OK(second);
  EXPECT_FALSE(second->succeeded);
  ASSERT_TRUE(second->holder.has_value());
  EXPECT_EQ(second->holder->value, "one");
  EXPECT_EQ(second->holder->lease, *l1);
  EXPECT_EQ(second->holder->create_revision, first->revision);

  auto ttl = c->LeaseKeepAlive(*l1);
  ASSERT_OK(ttl);
  EXPECT_GT(*ttl, absl::ZeroDuration());
  // Revoking the holder's lease deletes the key: the next create wins with
  // a higher create_revision (the election's term).
  ASSERT_OK(c->LeaseRevoke(*l1));
  EXPECT_FALSE(c->Get("/job/leader")->has_value());
  auto third = c->CreateIfAbsent("/job/leader", "two", *l2);
  ASSERT_OK(third);
  EXPECT_TRUE(third->succeeded);
  EXPECT_GT(third->holder->create_revision, first->holder->create_revision);
  EXPECT_EQ(c->Get("/job/leader")->value().lease, *l2);
  // An ended lease renews to 0 and cannot be revoked again.
  EXPECT_EQ(*c->LeaseKeepAlive(*l1), absl::ZeroDuration());
  EXPECT_THAT(c->LeaseRevoke(*l1), StatusIs(absl::StatusCode::kNotFound));
  // A put on an ended lease is refused by etcd, with its message.
  EXPECT_THAT(c->Put("/x", "y", *l1), StatusIs(absl::StatusCode::kNotFound,
                                               HasSubstr("lease not found")));
}

TEST_F(RealEtcdTest, FailsOverToAnEndpointThatAnswers) {
  auto dead = FreePort();
  ASSERT_OK(dead);
  EtcdOptions o;
  o.endpoints = {absl::StrCat("http://127.0.0.1:", *dead), etcd_->endpoint()};
  auto c = EtcdClient::Create(o);
  ASSERT_OK(c);
  ASSERT_OK((*c)->Put("/k", "v"));
  EXPECT_EQ((*c)->Get("/k")->value().value, "v");
}

TEST_F(RealEtcdTest, Credentials) {
  ASSERT_OK(etcd_->Etcdctl({"user", "add", "root:pw"}));
  ASSERT_OK(etcd_->Etcdctl({"user", "add", "alice:apw"}));  // no role
  ASSERT_OK(etcd_->Etcdctl({"auth", "enable"}));
  EtcdOptions o;
  o.endpoints = {etcd_->endpoint()};
  EXPECT_THAT(EtcdClient::Create(o),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("requires authentication")));
  o.user = "root";
  o.password = "wrong";
  EXPECT_THAT(
      EtcdClient::Create(o),
      StatusIs(absl::StatusCode::kUnauthenticated,
               AllOf(HasSubstr("'root'"), HasSubstr(etcd_->endpoint()))));
  o.user = "alice";
  o.password = "apw";
  EXPECT_THAT(
      EtcdClient::Create(o),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("'alice'"), HasSubstr(etcd_->endpoint()))));
  auto c = Client("root", "pw");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->Put("/k", "v"));
  // The test etcd's tokens live 2 s: the client logs in again by itself.
  absl::SleepFor(absl::Seconds(4));
  ASSERT_OK(c->Put("/k", "w"));
  EXPECT_EQ(c->Get("/k")->value().value, "w");
}

// ---- untrusted answers
// -------------------------------------------------------

class MalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = FakeHttpServer::Start([this](const std::string& path,
                                          const std::string&) {
      // Create's probe gets a good answer; then whatever the test chose.
      if (path == "/v3/kv/range" && !created_) {
        created_ = true;
        return FakeHttpServer::Response(200, R"({"header":{"revision":"1"}})");
      }
      absl::MutexLock lock(&mu_);
      return answer_;
    });
    ASSERT_OK(s);
    server_ = std::move(*s);
    EtcdOptions o;
    o.endpoints = {server_->endpoint()};
    auto c = EtcdClient::Create(o);
    ASSERT_OK(c);
    client_ = std::move(*c);
  }
  void Answer(std::string raw) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(raw);
  }
  std::atomic<bool> created_{false};
  absl::Mutex mu_;
  std::string answer_;
  std::unique_ptr<FakeHttpServer> server_;
  std::unique_ptr<EtcdClient> client_;
};

TEST_F(MalformedTest, NotJson) {
  Answer(FakeHttpServer::Response(200, "<html>hello</html>"));
  EXPECT_THAT(client_->Get("/k"),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("malformed"), HasSubstr("/v3/kv/range"),
                             HasSubstr(server_->endpoint()))));
  Answer(FakeHttpServer::Response(200, "[1,2]"));
  EXPECT_THAT(
      client_->LeaseGrant(absl::Seconds(2)),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("not a JSON object")));
  Answer(FakeHttpServer::Response(200, R"({"kvs":[{"key":"L2s=")"));
  EXPECT_THAT(client_->Get("/k"), StatusIs(absl::StatusCode::kInternal));
}

TEST_F(MalformedTest, WrongFields) {
  Answer(FakeHttpServer::Response(200, R"({"kvs":"many"})"));
  EXPECT_THAT(client_->GetPrefix("/"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("'kvs'")));
  Answer(FakeHttpServer::Response(200, R"({"kvs":[{"key":"!!not base64"}]})"));
  EXPECT_THAT(client_->Get("/k"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("base64")));
  Answer(FakeHttpServer::Response(
      200, R"({"kvs":[{"key":"L2s=","create_revision":"x"}]})"));
  EXPECT_THAT(client_->Get("/k"), StatusIs(absl::StatusCode::kInternal,
                                           HasSubstr("create_revision")));
  Answer(FakeHttpServer::Response(200, R"({"kvs":[{"key":"L290aGVy"}]})"));
  EXPECT_THAT(client_->Get("/k"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("another key")));
  Answer(FakeHttpServer::Response(200, R"({"header":{}})"));
  EXPECT_THAT(client_->LeaseGrant(absl::Seconds(2)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("lease ID")));
  Answer(FakeHttpServer::Response(
      200, R"({"header":{"revision":"3"},"responses":7})"));
  EXPECT_THAT(client_->CreateIfAbsent("/k", "v", 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("malformed")));
  Answer(FakeHttpServer::Response(
      200, R"({"header":{"revision":"3"},"succeeded":"yes"})"));
  EXPECT_THAT(client_->CreateIfAbsent("/k", "v", 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("succeeded")));
  Answer(FakeHttpServer::Response(200, R"({"header":{"revision":"3"}})"));
  EXPECT_THAT(client_->LeaseKeepAlive(1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("result")));
  Answer(FakeHttpServer::Response(
      200, R"({"error":{"grpc_code":5,"message":"lease gone"}})"));
  EXPECT_THAT(client_->LeaseKeepAlive(1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("lease gone")));
}

TEST_F(MalformedTest, ErrorStatusesAndTruncation) {
  Answer(FakeHttpServer::Response(500, "Internal Server Error"));
  EXPECT_THAT(client_->Put("/k", "v"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 500")));
  Answer(FakeHttpServer::Response(404, "Not Found"));
  EXPECT_THAT(client_->Put("/k", "v"),
              StatusIs(absl::StatusCode::kUnknown, HasSubstr("HTTP 404")));
  Answer(FakeHttpServer::Response(400, R"({"error":"bad","code":99})"));
  EXPECT_THAT(client_->Put("/k", "v"),
              StatusIs(absl::StatusCode::kUnknown, HasSubstr("bad")));
  Answer(FakeHttpServer::Response(
      400, R"({"error":"etcdserver: no such thing","code":9})"));
  EXPECT_THAT(client_->Delete("/k"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("etcdserver: no such thing")));
  // The body ends before its Content-Length: a transport error.
  Answer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"header\":");
  EXPECT_THAT(client_->Get("/k"), StatusIs(absl::StatusCode::kUnavailable));
  Answer("garbage that is not HTTP\r\n\r\n");
  EXPECT_THAT(client_->Get("/k"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(EtcdClientMalformedTest, CreateRefusesAGarbageServer) {
  auto s = FakeHttpServer::Start([](const std::string&, const std::string&) {
    return FakeHttpServer::Response(200, "not json");
  });
  ASSERT_OK(s);
  EtcdOptions o;
  o.endpoints = {(*s)->endpoint()};
  EXPECT_THAT(EtcdClient::Create(o),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("malformed")));
}

}  // namespace
}  // namespace gift::daemon::coord
