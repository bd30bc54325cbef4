#include "kernels/gpu.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/status_matchers.h"

namespace gift::gpu {
namespace {

TEST(GpuRuntimeTest, DeviceCountNeverNegative) {
  EXPECT_GE(DeviceCount(), 0);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(DeviceCount(), 0);
  }
}

TEST(GpuRuntimeTest, CreateWithoutDeviceIsUnavailable) {
  if (Available()) GTEST_SKIP() << "a GPU is present";
  auto ctx = Context::Create();
  EXPECT_THAT(ctx, testing::StatusIs(absl::StatusCode::kUnavailable));
}

TEST(GpuRuntimeTest, RejectsDeviceOutOfRange) {
  auto ctx = Context::Create(DeviceCount() + 3);
  EXPECT_THAT(ctx, testing::StatusIs(absl::StatusCode::kUnavailable));
}

TEST(GpuRuntimeTest, BufferRoundTrip) {
  if (!Available()) GTEST_SKIP() << "no GPU";
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * i - 7.0f;
  DeviceBuffer<float> d;
  ASSERT_OK(d.Allocate(host.size()));
  ASSERT_OK(d.Upload(host.data(), host.size()));
  std::vector<float> back(host.size(), -1.0f);
  ASSERT_OK(d.Download(back.data(), back.size()));
  EXPECT_EQ(back, host);
  EXPECT_THAT(d.Download(back.data(), back.size() + 1),
              testing::StatusIs(absl::StatusCode::kOutOfRange));
}

}  // namespace
}  // namespace gift::gpu
