// A small client for etcd's v3 API over its HTTP/JSON gateway (etcd 3.4
// serves it on the client port under /v3/): the handful of calls a leader
// election needs (leases, put/get, a create-if-absent transaction, delete).
// It talks HTTP(S) through libcurl; keys and values travel base64-encoded
// and etcd's int64 fields come back as JSON strings.
//
// Every response is untrusted input: a non-2xx status, malformed JSON or a
// field of the wrong type becomes a Status naming the endpoint and the call,
// never a crash. A call that cannot reach an endpoint (or that endpoint
// answers UNAVAILABLE) is retried on the next endpoint; the one that
// answered is tried first next time. With a user and password the client
// authenticates and sends etcd's token in the "Authorization" header; an
// expired token is renewed once per call.
//
//   ASSIGN_OR_RETURN(auto endpoints, ParseCoordinator("etcd://h1:2379"));
//   EtcdOptions o;
//   o.endpoints = endpoints;
//   ASSIGN_OR_RETURN(auto etcd, EtcdClient::Create(o));
//   ASSIGN_OR_RETURN(int64_t lease, etcd->LeaseGrant(absl::Seconds(5)));
//   ASSIGN_OR_RETURN(TxnResult r, etcd->CreateIfAbsent("/k", "v", lease));
//
// Thread safety: thread-safe; calls from several threads run concurrently
// (each on its own HTTP connection).
#ifndef GIFT_DAEMON_COORD_ETCD_CLIENT_H_
#define GIFT_DAEMON_COORD_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gift::daemon::coord {

// The endpoints of a `coordinator:` URI: "etcd://h1:2379,h2:2379" gives
// {"http://h1:2379", "http://h2:2379"}; "etcds://…" gives https:// ones.
// Hosts may be names, IPv4 or bracketed IPv6 ("[::1]:2379"); every host
// needs a port. Anything else is INVALID_ARGUMENT naming the input.
absl::StatusOr<std::vector<std::string>> ParseCoordinator(
    absl::string_view uri);

struct EtcdOptions {
  // Base URLs, "http://127.0.0.1:2379" or "https://…", tried in order.
  // REQUIRES: at least one.
  std::vector<std::string> endpoints;
  // TLS: the CA that signed etcd's certificate, and this client's
  // certificate and key for etcd's client-certificate auth. Default: none
  // (the system's CAs; no client certificate).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // etcd's auth: a user and its password. Default: none (auth disabled).
  std::string user;
  std::string password;
  // The limit of one HTTP request to one endpoint, connecting included.
  // Default: 2 s. REQUIRES: > 0.
  absl::Duration request_timeout = absl::Seconds(2);
};

// One key of etcd (mvccpb.KeyValue).
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the put that created it
  int64_t mod_revision = 0;     // revision of its last put
  int64_t version = 0;          // puts since it was created
  int64_t lease = 0;            // its lease, 0 for none
};

// What CreateIfAbsent found.
struct TxnResult {
  bool succeeded = false;  // true: this call created the key
  // The key as it is now: the one this call created, or the current holder.
  // Absent only when etcd answered a failed compare without the key.
  std::optional<KeyValue> holder;
  int64_t revision = 0;  // the store's revision after the transaction
};

class EtcdClient {
 public:
  // Checks that an endpoint answers (a read of one key, so it also checks
  // the credentials and the read permission) and, with a user, logs in.
  // Errors: UNAVAILABLE naming the endpoints tried; UNAUTHENTICATED or
  // PERMISSION_DENIED naming the user and the endpoint; INVALID_ARGUMENT
  // for bad options.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A lease of `ttl` (whole seconds, rounded up; etcd may grant more).
  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl);
  // Renews a lease; returns its TTL, or 0 when it has expired (or never
  // existed).
  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t lease);
  // Ends a lease and deletes its keys. NOT_FOUND when it has expired.
  absl::Status LeaseRevoke(int64_t lease);

  // Sets key to value, attached to `lease` (0: none). Returns the revision.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease = 0);
  // The key, or nullopt when it does not exist.
  absl::StatusOr<std::optional<KeyValue>> Get(absl::string_view key);
  // Every key that starts with `prefix`, in key order.
  absl::StatusOr<std::vector<KeyValue>> GetPrefix(absl::string_view prefix);
  // Creates key = value on `lease` when the key does not exist
  // (create_revision == 0); otherwise returns the current holder.
  absl::StatusOr<TxnResult> CreateIfAbsent(absl::string_view key,
                                           absl::string_view value,
                                           int64_t lease);
  // Deletes the key; returns how many keys were deleted (0 or 1).
  absl::StatusOr<int64_t> Delete(absl::string_view key);

  const EtcdOptions& options() const { return options_; }

 private:
  // A 2xx answer's body and the endpoint that gave it (for errors).
  struct Reply {
    std::string endpoint;
    std::string body;
  };
  explicit EtcdClient(EtcdOptions options);

  absl::Status Authenticate(const std::string& endpoint);
  // POSTs the JSON `body` to `path`, failing over across the endpoints.
  absl::StatusOr<Reply> Post(const std::string& path, const std::string& body);

  const EtcdOptions options_;
  absl::Mutex mu_;
  size_t preferred_ ABSL_GUARDED_BY(mu_) = 0;  // endpoint that last answered
  std::string token_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::daemon::coord

#endif  // GIFT_DAEMON_COORD_ETCD_CLIENT_H_
