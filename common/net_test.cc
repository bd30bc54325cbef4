#include "common/net.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"

namespace gift::net {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SplitHostPortTest, HostAndPort) {
  struct Case {
    const char* address;
    const char* host;
    const char* port;
  };
  for (const Case& c :
       {Case{"h:80", "h", "80"}, Case{"10.0.0.1:50151", "10.0.0.1", "50151"},
        Case{"[::1]:0", "::1", "0"},
        Case{"[fe80::1%eth0]:9", "fe80::1%eth0", "9"}, Case{":80", "", "80"},
        Case{"h:", "h", ""}, Case{"h:x", "h", "x"}}) {
    absl::StatusOr<SplitAddress> s = SplitHostPort(c.address);
    ASSERT_OK(s) << c.address;
    EXPECT_EQ(s->host, c.host) << c.address;
    EXPECT_EQ(s->port, c.port) << c.address;
  }
}

TEST(SplitHostPortTest, Errors) {
  struct Case {
    const char* address;
    const char* why;
  };
  for (const Case& c :
       {Case{"", "missing port"}, Case{"localhost", "missing port"},
        Case{"[::1]", "missing port"}, Case{"::1:80", "in brackets"},
        Case{"[::1:80", "missing ']'"}, Case{"[::1]80", "':' after ']'"},
        Case{"[]:80", "empty host"}, Case{"a]:80", "misplaced"},
        Case{"[a[b]:80", "misplaced"}}) {
    EXPECT_THAT(SplitHostPort(c.address),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.why)))
        << c.address;
    EXPECT_THAT(SplitHostPort(c.address).status().message(),
                HasSubstr(absl::StrCat("address '", c.address, "'")));
  }
}

TEST(ParsePortTest, ZeroTo65535InDigitsOnly) {
  EXPECT_EQ(*ParsePort("0"), 0);
  EXPECT_EQ(*ParsePort("80"), 80);
  EXPECT_EQ(*ParsePort("65535"), 65535);
  EXPECT_EQ(*ParsePort("00080"), 80);
  for (const char* bad : {"", "65536", "99999", "-1", "+80", " 80", "80 ",
                          "80x", "http", "123456", "0x50"}) {
    EXPECT_THAT(ParsePort(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("port must be a number in 0..65535 "
                                      "(got '",
                                      bad, "')")))
        << bad;
  }
}

TEST(ParseHostPortTest, SplitsAndChecksThePort) {
  absl::StatusOr<HostPort> hp = ParseHostPort("[::1]:50151");
  ASSERT_OK(hp);
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 50151);
  EXPECT_THAT(ParseHostPort("h:99999"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "address 'h:99999': port must be a number in "
                       "0..65535 (got '99999')"));
  EXPECT_THAT(ParseHostPort("h:"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'h:'")));
  EXPECT_THAT(ParseHostPort("h"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("missing port")));
}

TEST(JoinHostPortTest, BracketsIpv6AndRoundTrips) {
  EXPECT_EQ(JoinHostPort("h", 80), "h:80");
  EXPECT_EQ(JoinHostPort("10.0.0.1", 0), "10.0.0.1:0");
  EXPECT_EQ(JoinHostPort("::1", 65535), "[::1]:65535");
  EXPECT_EQ(JoinHostPort("", 80), ":80");
  for (const char* address : {"h:80", "[::1]:7", "[fe80::1%eth0]:9", ":1"}) {
    absl::StatusOr<HostPort> hp = ParseHostPort(address);
    ASSERT_OK(hp);
    EXPECT_EQ(JoinHostPort(hp->host, hp->port), address);
  }
}

TEST(IsLoopbackTest, LocalhostAnd127Slash8AndColonColon1) {
  for (const char* host :
       {"localhost", "LocalHost", "127.0.0.1", "127.0.0.2", "127.255.255.255",
        "::1", "[::1]", "0:0:0:0:0:0:0:1", "[0::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host :
       {"", "0.0.0.0", "::", "[::]", "128.0.0.1", "126.255.255.255", "10.1.2.3",
        "::2", "::ffff:127.0.0.1", "localhost.example.com", "my-localhost",
        "127.0.0.1.example.com", "127.1", "*"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(IsLoopbackTest, Addresses) {
  for (const char* address :
       {"localhost:0", "127.0.0.1:50151", "127.9.9.9:1", "[::1]:0"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  // The old grpc_server OffLoopbackNeedsATokenFile set, and what does not
  // split (no port, IPv6 without brackets).
  for (const char* address : {"0.0.0.0:0", "[::]:0", ":0", "10.1.2.3:7070",
                              "localhost", "127.0.0.1", "::1:80", "[::1]"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(IsWildcardHostTest, EmptyAnyV4AndUnspecifiedV6) {
  for (const char* host : {"", "0.0.0.0", "::", "[::]", "0:0::0"}) {
    EXPECT_TRUE(IsWildcardHost(host)) << host;
  }
  for (const char* host :
       {"127.0.0.1", "::1", "localhost", "0", "0.0.0.1", "*", "h"}) {
    EXPECT_FALSE(IsWildcardHost(host)) << host;
  }
}

}  // namespace
}  // namespace gift::net
