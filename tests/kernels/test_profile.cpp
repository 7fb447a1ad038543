// core/profile.h through the ops of kernels/ops.h on the CPU: names with GEMM shapes, one count
// per call, nested scopes counted once, nothing recorded while off, each take starts afresh.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/profile.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

std::map<std::string, ProfileEntry> by_name(const std::vector<ProfileEntry>& v) {
  std::map<std::string, ProfileEntry> m;
  for (const ProfileEntry& e : v) m[e.name] = e;
  return m;
}

TEST(Profile, TimesEachOpByNameWhileOn) {
  (void)take_profile();
  Tensor a = Tensor::from_vector<float>({8, 16}, testing::random_vector(8 * 16, 1));
  Tensor b = Tensor::from_vector<float>({16, 4}, testing::random_vector(16 * 4, 2));
  Tensor out = Tensor::zeros({8, 4}, DType::kF32);
  matmul(out, a, b, false, false);  // off: not recorded
  EXPECT_TRUE(take_profile().empty());

  set_profiling(true);
  for (int i = 0; i < 3; ++i) matmul(out, a, b, false, false);
  matmul(out, a, b, false, false, 1.f, 1.f);
  add_inplace(out, out.clone());
  {
    ProfileScope outer(Device::cpu(), "outer");  // the ops inside are part of it, not counted again
    EXPECT_TRUE(outer.active());
    matmul(out, a, b, false, false);
  }
  set_profiling(false);
  const auto m = by_name(take_profile());
  ASSERT_EQ(m.size(), 4u) << "matmul plain, matmul accumulating, add_inplace, outer";
  EXPECT_EQ(m.at("matmul 8x4x16 nn ->f32").calls, 3);
  EXPECT_EQ(m.at("matmul 8x4x16 nn ->f32 +=").calls, 1);
  EXPECT_EQ(m.at("add_inplace").calls, 1);
  EXPECT_EQ(m.at("outer").calls, 1);
  for (const auto& [name, e] : m) EXPECT_GE(e.ms, 0) << name;
  EXPECT_TRUE(take_profile().empty()) << "a take clears the totals";
}

TEST(Profile, ThreadProfilingCountsOnlyThatThread) {
  (void)take_profile();
  Tensor x = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  set_thread_profiling(true);
  EXPECT_TRUE(profiling());
  scale_inplace(x, 2.f);
  std::thread other([&] {
    EXPECT_FALSE(profiling());
    Tensor y = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
    scale_inplace(y, 2.f);
  });
  other.join();
  set_thread_profiling(false);
  EXPECT_FALSE(profiling());
  const auto m = by_name(take_profile());
  ASSERT_EQ(m.count("scale_inplace"), 1u);
  EXPECT_EQ(m.at("scale_inplace").calls, 1);
}

TEST(Profile, TableSharesAndRemainder) {
  const std::vector<ProfileEntry> v = {{"matmul 1x2x3 nn ->bf16", 10, 60.0}, {"attn_forward", 2, 20.0}};
  const std::string t = format_profile(v, 100.0);
  EXPECT_NE(t.find("60.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("profiled ops in all"), std::string::npos) << t;
  EXPECT_NE(t.find("80.00"), std::string::npos) << t;  // the profiled sum
  EXPECT_NE(t.find("20.0%"), std::string::npos) << t;   // attention's share, and the remainder's
  const std::string top1 = format_profile(v, 100.0, 1);
  EXPECT_NE(top1.find("(1 more ops)"), std::string::npos) << top1;
}

}  // namespace
}  // namespace seqpar
