// The representations behind the public C++ API of libgift (include/gift/)
// and the conversions between it and the library's internal types. Not
// installed; only client/api/*.cc include it.
//
// The public classes hold their internal objects through these Reps
// (pimpl), so that the public headers name nothing of abseil or of
// gift::client.
#ifndef GIFT_CLIENT_API_INTERNAL_H_
#define GIFT_CLIENT_API_INTERNAL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/epoch_plan.h"
#include "client/giftd_connection.h"
#include "client/store.h"
#include "client/transport.h"
#include "gift/allreduce.h"
#include "gift/bucket_plan.h"
#include "gift/communicator.h"
#include "gift/daemon_attachment.h"
#include "gift/status.h"

namespace gift {

struct Communicator::Rep {
  CommunicatorOptions options;
  // The rendezvous store and the namespace the communicator used; kept for
  // the communicator's lifetime (a daemon store holds a gRPC channel).
  std::unique_ptr<client::Store> store;
  std::unique_ptr<client::PrefixStore> prefixed;
  std::unique_ptr<client::Transport> comm;
  std::string endpoint;
};

struct BucketPlan::Rep {
  Rep(client::EpochPlan p, std::vector<LayerSpec> l)
      : plan(std::move(p)), layers(std::move(l)) {}
  client::EpochPlan plan;
  std::vector<LayerSpec> layers;  // the public view of plan.layers()
};

struct DaemonAttachment::Rep {
  BucketPlan base;
  std::unique_ptr<client::GiftdConnection> attachment;
  // The allreduce this attachment serves (QuantizedAllReduce::Attach), or
  // null.
  std::atomic<const void*> owner{nullptr};
};

namespace api {

// The public status of an internal one (same codes, same message).
Status FromAbsl(const absl::Status& status);
// Shorthands for the facade's own checks.
Status InvalidArgument(std::string message);
Status FailedPrecondition(std::string message);

// OK, or FAILED_PRECONDITION naming the CPU features this build needs that
// the CPU lacks (kernels/cpu_baseline.h); checked once per process.
Status CheckCpu();

client::BucketLayer ToInternal(const LayerSpec& layer);
LayerSpec FromInternal(const client::BucketLayer& layer);

}  // namespace api
}  // namespace gift

#endif  // GIFT_CLIENT_API_INTERNAL_H_
