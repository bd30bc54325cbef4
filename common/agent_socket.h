// Where giftd's Agent service listens by default: the one definition of the
// unix socket path that the daemon binds (daemon/config.h) and the ranks
// connect to (the attachment and the daemon-served rendezvous store).
//
//   std::string path = options.agent_socket.empty() ? DefaultAgentSocket()
//                                                   : options.agent_socket;
//
// The Python package reads it through its extension (gift._gift.
// default_agent_socket).
//
// Thread safety: DefaultAgentSocket reads the environment; call it while no
// thread changes the environment (setenv).
#ifndef GIFT_COMMON_AGENT_SOCKET_H_
#define GIFT_COMMON_AGENT_SOCKET_H_

#include <cstdlib>
#include <string>

namespace gift {

// The daemon's default agent_socket, and the clients' without
// $GIFT_AGENT_SOCKET.
inline constexpr char kDefaultAgentSocket[] = "/tmp/gift/agent.sock";

// The variable through which launchers tell the ranks where their node's
// giftd listens (deploy/: /run/gift/agent.sock under systemd and k8s).
inline constexpr char kAgentSocketEnv[] = "GIFT_AGENT_SOCKET";

// The clients' default: $GIFT_AGENT_SOCKET when set and not empty, else
// kDefaultAgentSocket.
inline std::string DefaultAgentSocket() {
  const char* env = std::getenv(kAgentSocketEnv);
  return env != nullptr && *env != '\0' ? env : kDefaultAgentSocket;
}

}  // namespace gift

#endif  // GIFT_COMMON_AGENT_SOCKET_H_
