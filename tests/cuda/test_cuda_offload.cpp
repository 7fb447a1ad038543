// core/offload.h on a GPU: tensors round-trip through pinned host memory bit for bit while the
// compute stream keeps working on other data (and reuses the pool's blocks), prefetched or not;
// the pinned bytes are accounted and given back.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "core/allocator.h"
#include "core/cuda/stream.h"
#include "core/offload.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace seqpar {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(CudaOffload, RoundTripsWhileTheComputeStreamWorks) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const int64_t n = int64_t{1} << 22;  // 16 MiB of f32 per tensor
  const int layers = 6;
  std::vector<std::vector<float>> want(layers);
  std::vector<std::shared_ptr<HostOffload::Handle>> handles;
  {
    HostOffload q(gpu);
    for (int l = 0; l < layers; ++l) {
      want[l] = testing::random_vector(static_cast<size_t>(n), 100 + l);
      Tensor t = Tensor::from_vector<float>({n}, want[l]).to(gpu);
      // Work on the compute stream after the put, writing blocks the pool hands out again.
      handles.push_back(q.put(std::move(t)));
      Tensor busy = Tensor::zeros({n}, DType::kF32, gpu);
      for (int r = 0; r < 4; ++r) scale_inplace(busy, 2.f);
    }
    EXPECT_GE(pinned_host_allocator().current_bytes(), static_cast<size_t>(layers * n * 4));
    for (int l = layers - 1; l >= 0; --l) {
      Tensor back = q.take(*handles[l]);
      if (l > 0 && l % 2 == 0) q.prefetch(*handles[l - 1]);  // some prefetched, some not
      Tensor other = Tensor::zeros({n}, DType::kF32, gpu);  // the pool keeps turning
      add_inplace(other, back);
      EXPECT_EQ(other.to_f32_vector(), want[l]) << "layer " << l;
    }
    handles.clear();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A tensor taken back (or prefetched) right after its put, while its copy out may still be running:
// the same values, and at most one device buffer of it at any time (the queue adopts the device
// tensor instead of allocating a second for a copy back, and holds no reference once it is taken).
TEST(CudaOffload, TakeRightAfterPutHoldsOneBuffer) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const int64_t n = int64_t{1} << 24;  // 64 MiB of f32: its copy out takes milliseconds
  const std::vector<float> want = testing::random_vector(static_cast<size_t>(n), 7);
  Allocator& pool = allocator_for(gpu);
  HostOffload q(gpu);
  for (bool prefetch_first : {false, true}) {
    Tensor t = Tensor::from_vector<float>({n}, want).to(gpu);
    const size_t with_one = pool.current_bytes();
    auto h = q.put(std::move(t));
    if (prefetch_first) q.prefetch(*h);
    EXPECT_LE(pool.current_bytes(), with_one) << "prefetch_first " << prefetch_first;
    Tensor back = q.take(*h);
    EXPECT_LE(pool.current_bytes(), with_one) << "prefetch_first " << prefetch_first;
    EXPECT_EQ(back.to_f32_vector(), want) << "prefetch_first " << prefetch_first;
    back = Tensor();
    q.collect();
    EXPECT_LE(pool.current_bytes(), with_one - static_cast<size_t>(n) * 4) << "the taken tensor is still held";
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace seqpar
