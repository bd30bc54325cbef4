// The rendezvous Store (client/store.h) served by the local giftd over its
// Agent unix socket: communicators of the ranks on one node bootstrap
// through the daemon, with no shared file system and no extra launcher
// arguments (DESIGN §3).
//
//   ASSIGN_OR_RETURN(auto store,
//                    DaemonStore::Connect(DefaultAgentSocket(), "job42"));
//   PrefixStore grad("grad/", store.get());
//   options.store = &grad;
//
// Thread safety: thread-safe (gRPC channels are).
#ifndef GIFT_CLIENT_DAEMON_STORE_H_
#define GIFT_CLIENT_DAEMON_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/store.h"

namespace gift::client {

class DaemonStore : public Store {
 public:
  // Does not contact the daemon; calls fail with UNAVAILABLE while it is
  // down. INVALID_ARGUMENT for an empty socket path or job id.
  static absl::StatusOr<std::unique_ptr<DaemonStore>> Connect(
      const std::string& agent_socket, const std::string& job_id);
  ~DaemonStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  struct Impl;
  explicit DaemonStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_DAEMON_STORE_H_
