#include "client/net_endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gift::client {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string Numeric(const sockaddr* sa) {
  char host[NI_MAXHOST] = {};
  const socklen_t len =
      sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) !=
      0) {
    return "";
  }
  return host;
}

struct Interfaces {
  // (name, address) of every interface that is up, IPv4 first.
  std::vector<std::pair<std::string, std::string>> up;
  std::set<std::string> names;
};

Interfaces ListInterfaces() {
  Interfaces out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (int family : {AF_INET, AF_INET6}) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_name == nullptr) continue;
      out.names.insert(i->ifa_name);
      if ((i->ifa_flags & IFF_UP) == 0 || i->ifa_addr->sa_family != family) {
        continue;
      }
      const std::string a = Numeric(i->ifa_addr);
      if (!a.empty() && a.find('%') == std::string::npos) {
        out.up.emplace_back(i->ifa_name, a);
      }
    }
  }
  freeifaddrs(list);
  return out;
}

absl::StatusOr<Endpoint> Named(const std::string& interface,
                               std::string source) {
  absl::StatusOr<std::string> a = InterfaceAddress(interface);
  if (!a.ok()) {
    return absl::Status(a.status().code(),
                        absl::StrCat(a.status().message(), " (", source, ")"));
  }
  return Endpoint{interface, *a, std::move(source)};
}

// The local address of a UDP socket connected to `host` (no packet sent).
absl::StatusOr<std::string> RouteTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "MASTER_ADDR=", host, " does not resolve: ", gai_strerror(rc)));
  }
  std::string local;
  for (addrinfo* r = res; r != nullptr && local.empty(); r = r->ai_next) {
    const int fd = socket(r->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage me{};
    socklen_t len = sizeof(me);
    if (connect(fd, r->ai_addr, r->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      local = Numeric(reinterpret_cast<sockaddr*>(&me));
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (local.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no route from this host to MASTER_ADDR=", host));
  }
  return local;
}

}  // namespace

EndpointRequest EndpointRequest::FromEnvironment(std::string interface) {
  EndpointRequest r;
  r.interface = std::move(interface);
  r.gloo_ifname = Env("GLOO_SOCKET_IFNAME");
  r.gift_ifname = Env("GIFT_SOCKET_IFNAME");
  r.master_addr = Env("MASTER_ADDR");
  return r;
}

absl::StatusOr<std::string> InterfaceAddress(const std::string& interface) {
  const Interfaces all = ListInterfaces();
  for (const auto& [name, address] : all.up) {
    if (name == interface) return address;
  }
  std::vector<std::string> have;
  for (const auto& [name, address] : all.up) {
    have.push_back(absl::StrCat(name, " ", address));
  }
  return absl::NotFoundError(absl::StrCat(
      "network interface '", interface,
      all.names.contains(interface) ? "' is down or has no address"
                                    : "' does not exist",
      "; this host has: ", have.empty() ? "none" : absl::StrJoin(have, ", ")));
}

absl::StatusOr<Endpoint> ResolveEndpoint(const EndpointRequest& request) {
  if (!request.interface.empty()) {
    return Named(request.interface,
                 absl::StrCat("socket_ifname=", request.interface));
  }
  if (!request.gloo_ifname.empty()) {
    const std::string first =
        std::string(*absl::StrSplit(request.gloo_ifname, ',').begin());
    return Named(first, absl::StrCat("GLOO_SOCKET_IFNAME=", first));
  }
  if (!request.gift_ifname.empty()) {
    return Named(request.gift_ifname,
                 absl::StrCat("GIFT_SOCKET_IFNAME=", request.gift_ifname));
  }
  if (!request.master_addr.empty()) {
    absl::StatusOr<std::string> local = RouteTo(request.master_addr);
    if (!local.ok()) return local.status();
    std::string interface;
    for (const auto& [name, address] : ListInterfaces().up) {
      if (address == *local) interface = name;
    }
    return Endpoint{
        interface, *local,
        absl::StrCat("the route to MASTER_ADDR=", request.master_addr)};
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host, nullptr, &hints, &res) == 0) {
      const std::string a = Numeric(res->ai_addr);
      freeaddrinfo(res);
      if (!a.empty()) {
        return Endpoint{"", a, absl::StrCat("the host name ", host)};
      }
    }
  }
  return Endpoint{"", "127.0.0.1", "no MASTER_ADDR, no host address"};
}

}  // namespace gift::client
