#include "client/net_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"

namespace gift::client {
namespace {

using ::gift::testing::StatusIs;
using ::testing::HasSubstr;

TEST(NetEndpointTest, NamedInterfacesComeFirstInPyTorchsOrder) {
  EndpointRequest r;
  r.interface = "lo";
  r.gloo_ifname = "nope0";
  r.master_addr = "127.0.0.1";
  absl::StatusOr<Endpoint> e = ResolveEndpoint(r);
  ASSERT_OK(e);
  EXPECT_EQ(e->interface, "lo");
  EXPECT_EQ(e->address, "127.0.0.1");
  EXPECT_EQ(e->source, "socket_ifname=lo");

  r.interface = "";
  r.gloo_ifname = "lo,eth7";  // PyTorch allows a list: the first is used
  r.gift_ifname = "nope0";
  e = ResolveEndpoint(r);
  ASSERT_OK(e);
  EXPECT_EQ(e->source, "GLOO_SOCKET_IFNAME=lo");

  r.gloo_ifname = "";
  r.gift_ifname = "lo";
  e = ResolveEndpoint(r);
  ASSERT_OK(e);
  EXPECT_EQ(e->source, "GIFT_SOCKET_IFNAME=lo");
}

TEST(NetEndpointTest, TheRouteToMasterAddrPicksTheInterface) {
  EndpointRequest r;
  r.master_addr = "127.0.0.1";
  absl::StatusOr<Endpoint> e = ResolveEndpoint(r);
  ASSERT_OK(e);
  EXPECT_EQ(e->address, "127.0.0.1");
  EXPECT_EQ(e->interface, "lo");
  EXPECT_THAT(e->source, HasSubstr("MASTER_ADDR=127.0.0.1"));
  r.master_addr = "localhost";
  ASSERT_OK(ResolveEndpoint(r));
}

TEST(NetEndpointTest, ErrorsNameTheInterfaceAndWhatTheHostHas) {
  EndpointRequest r;
  r.gloo_ifname = "nope0";
  absl::StatusOr<Endpoint> e = ResolveEndpoint(r);
  EXPECT_THAT(e, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(e.status().message(), HasSubstr("'nope0' does not exist"));
  EXPECT_THAT(e.status().message(), HasSubstr("lo 127.0.0.1"));
  EXPECT_THAT(e.status().message(), HasSubstr("GLOO_SOCKET_IFNAME=nope0"));
  r = EndpointRequest();
  r.master_addr = "no-such-host.invalid";
  EXPECT_THAT(ResolveEndpoint(r), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(NetEndpointTest, WithoutAnyHintTheHostNameOrLoopbackIsUsed) {
  absl::StatusOr<Endpoint> e = ResolveEndpoint(EndpointRequest());
  ASSERT_OK(e);
  EXPECT_FALSE(e->address.empty());
}

}  // namespace
}  // namespace gift::client
