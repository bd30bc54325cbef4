// The C++ API of libgift in one include: Status, Communicator (the factory
// of the Gloo and NCCL backends), BucketPlan, QuantizedAllReduce and
// DaemonAttachment. The C ABI is gift/c_api.h.
//
// Link with `pkg-config --cflags --libs gift`, or in CMake:
//   find_package(gift REQUIRED)
//   target_link_libraries(trainer PRIVATE gift::gift)
// The C++ API needs the same C++ standard library ABI as libgift (GCC's
// libstdc++, C++17 or later); gift/c_api.h has no such requirement.
#ifndef GIFT_GIFT_H_
#define GIFT_GIFT_H_

#include "gift/allreduce.h"
#include "gift/bucket_plan.h"
#include "gift/communicator.h"
#include "gift/daemon_attachment.h"
#include "gift/export.h"
#include "gift/status.h"

#endif  // GIFT_GIFT_H_
