// Presents a gift Store to Gloo's rendezvous (gloo::rendezvous::Context::
// connectFullMesh), which exchanges the ranks' TCP addresses through it.
//
//   GlooStoreAdapter adapter(&store, absl::Seconds(60));
//   context->connectFullMesh(adapter, device);
//
// Gloo's store interface reports failure by exception: an error or timeout of
// the underlying Store is thrown as gloo::IoException carrying the Status
// text, which the Gloo communicator's single exception handler turns back
// into a Status. Internal to the Gloo backend.
// Thread-safe if the underlying Store is. `store` must outlive the adapter.
#ifndef GIFT_CLIENT_GLOO_STORE_ADAPTER_H_
#define GIFT_CLIENT_GLOO_STORE_ADAPTER_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/store.h"

namespace gift::client {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and the wait() overload without a timeout.
  GlooStoreAdapter(::gift::client::Store* store, absl::Duration timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  ::gift::client::Store* const store_;
  const absl::Duration timeout_;
};

}  // namespace gift::client

#endif  // GIFT_CLIENT_GLOO_STORE_ADAPTER_H_
