// core/offload.h on the CPU: a round trip gives the bytes back, the host copy is accounted apart
// from the CPU "device" allocator while it waits, and a handle is taken once.
#include <gtest/gtest.h>

#include <vector>

#include "core/allocator.h"
#include "core/offload.h"
#include "core/tensor.h"

namespace seqpar {
namespace {

TEST(HostOffload, RoundTripFreesTheDeviceSideMeanwhile) {
  HostOffload q(Device::cpu());
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 7.f;
  const size_t device_before = cpu_allocator().current_bytes();
  const size_t host_before = offload_host_allocator().current_bytes();
  std::shared_ptr<HostOffload::Handle> h, h2;
  {
    Tensor t = Tensor::from_vector<float>({10, 100}, values);
    EXPECT_EQ(cpu_allocator().current_bytes(), device_before + t.nbytes());
    h = q.put(std::move(t));
  }
  EXPECT_EQ(cpu_allocator().current_bytes(), device_before) << "the source went back to its allocator";
  EXPECT_EQ(offload_host_allocator().current_bytes(), host_before + values.size() * sizeof(float));
  h2 = q.put(Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  q.prefetch(*h);  // optional, and harmless twice
  q.prefetch(*h);
  Tensor back = q.take(*h);
  EXPECT_EQ(back.shape(), (Shape{10, 100}));
  EXPECT_EQ(back.to_f32_vector(), values);
  EXPECT_EQ(offload_host_allocator().current_bytes(), host_before + 4 * sizeof(float)) << "h's host copy released";
  EXPECT_THROW(q.take(*h), Error);
  EXPECT_EQ(q.take(*h2).to_f32_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(offload_host_allocator().current_bytes(), host_before);
  EXPECT_THROW(q.put(Tensor()), Error);
}

}  // namespace
}  // namespace seqpar
