// Host side of the Hopper backward main kernel (attn_bwd_sm90.h): tensor maps for the bulk tensor
// copies, the kernel's own per-tile mask statistics (bwd_sm90_bm(D)-query and 128-key tiles), the launch.
// Both head dims: two consumer warpgroups (128 keys per CTA), a producer warpgroup, a 2-stage ring of
// Q / dO / lse2 / delta tiles. Each for bf16 and f16 (BwdParams::elem).
#include "attention/cuda/attn_bwd_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "attention/cuda/attn_bwd_sm90.cuh"
#include "attention/cuda/attn_sm90_tma.h"
#include "core/cuda_check.h"
#include "core/error_base.h"

namespace seqpar::cuda_attn {

namespace {

// Two stages at both head dims (BwdShape::kDqTiles says why).
constexpr int kStages = 2;

// bwd_sm90_kernel's parameters (five tensor maps, BwdParams, three stats pointers) fit in 4 KB, the
// kernel parameter space every CUDA version allows.
static_assert(5 * sizeof(CUtensorMap) + sizeof(BwdParams) + 3 * sizeof(const int4*) <= 4096,
              "bwd_sm90_kernel's parameters exceed 4 KB");

// (SEQPAR_SM90_BWD_PER_HEAD) dk (+)= sum over the group's query heads of dk_h, dv likewise: dkh / dvh f32 [Tk, H, D]
// (scale already applied), dk / dv as p says (type, write or add). One thread per pair of columns.
template <Elem E>
__global__ void sum_group_heads(const BwdParams p, const float* __restrict__ dkh, const float* __restrict__ dvh) {
  const int64_t pairs = static_cast<int64_t>(p.Tk) * p.Hkv * p.D / 2;
  const int G = p.H / p.Hkv;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < pairs;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = 2 * x;  // element (t, hk, d) of dk [Tk, Hkv, D]
    const int d = static_cast<int>(e % p.D);
    const int64_t th = e / p.D;  // t * Hkv + hk
    const int64_t src = (th / p.Hkv * p.H + th % p.Hkv * G) * p.D + d;
    float k0 = 0.f, k1 = 0.f, v0 = 0.f, v1 = 0.f;
    for (int g = 0; g < G; ++g) {
      const float2 a = *reinterpret_cast<const float2*>(dkh + src + static_cast<int64_t>(g) * p.D);
      const float2 b = *reinterpret_cast<const float2*>(dvh + src + static_cast<int64_t>(g) * p.D);
      k0 += a.x;
      k1 += a.y;
      v0 += b.x;
      v1 += b.y;
    }
    detail::store_pair<E>(p.dk, p.grad_f32, p.write_grads, e, k0, k1);
    detail::store_pair<E>(p.dv, p.grad_f32, p.write_grads, e, v0, v1);
  }
}

template <Elem E, int D>
void run(const BwdParams& p, cudaStream_t stream) {
  using S = sm90::BwdShape<D, kStages>;
  static_assert(S::BM == bwd_sm90_bm(D), "the header's query tile is the kernel's");
  const int nqt = (p.Tq + S::BM - 1) / S::BM;
  const int nkt = (p.Tk + S::BN - 1) / S::BN;
  SEQPAR_CHECK_MSG(nkt <= 65535, "the sm_90 flash backward takes at most 65535 key tiles of 128 (Tk=" +
                                   std::to_string(p.Tk) + ")");
  const CUtensorMap tq = token_tensor_map(p.q, E, p.Tq, p.H, D, S::BM, "q");
  const CUtensorMap tdo = token_tensor_map(p.dout, E, p.Tq, p.H, D, S::BM, "dout");
  const CUtensorMap tk = token_tensor_map(p.k, E, p.Tk, p.Hkv, D, S::BN, "k");
  const CUtensorMap tv = token_tensor_map(p.v, E, p.Tk, p.Hkv, D, S::BN, "v");
  const CUtensorMap tdq = f32_token_tensor_map(p.dq_acc, p.Tq, p.H, D, S::BM, "dq_acc");

  // [nqt] query tiles, then [nkt] key tiles; after them the query tiles' run flags (launch_tile_stats).
  int4* stats = nullptr;
  SEQPAR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&stats), sizeof(int4) * (nqt + nkt) + sizeof(int32_t) * nqt,
                                    stream));
  int32_t* q_runs = reinterpret_cast<int32_t*>(stats + nqt + nkt);
  launch_tile_stats(stats, p.q_seg, p.q_pos, p.Tq, S::BM, stream, q_runs);
  launch_tile_stats(stats + nqt, p.k_seg, p.k_pos, p.Tk, S::BN, stream);

  auto kernel = sm90::bwd_sm90_kernel<E, D, kStages>;
  SEQPAR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
  if constexpr (SEQPAR_SM90_BWD_PER_HEAD) {
    // dK / dV per query head into f32 scratch (written, zeros included), then summed per KV group into dk / dv.
    const int64_t n = static_cast<int64_t>(p.Tk) * p.H * D;
    float* scratch = nullptr;
    SEQPAR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), sizeof(float) * 2 * n, stream));
    BwdParams ph = p;
    ph.dk = scratch;
    ph.dv = scratch + n;
    ph.grad_f32 = true;
    ph.write_grads = true;
    kernel<<<dim3(nkt, p.H), S::kThreads, S::kSmem, stream>>>(tq, tdo, tk, tv, tdq, ph, stats, stats + nqt, q_runs);
    SEQPAR_LAUNCH_CHECK();
    const int64_t pairs = static_cast<int64_t>(p.Tk) * p.Hkv * D / 2;
    const int blocks = static_cast<int>(std::min<int64_t>((pairs + 255) / 256, 132 * 16));
    sum_group_heads<E><<<blocks, 256, 0, stream>>>(p, scratch, scratch + n);
    SEQPAR_LAUNCH_CHECK();
    SEQPAR_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  } else {
    const dim3 grid = SEQPAR_SM90_BWD_KT_MAJOR ? dim3(nkt, p.Hkv) : dim3(p.Hkv, nkt);
    kernel<<<grid, S::kThreads, S::kSmem, stream>>>(tq, tdo, tk, tv, tdq, p, stats, stats + nqt, q_runs);
    SEQPAR_LAUNCH_CHECK();
  }
  SEQPAR_CUDA_CHECK(cudaFreeAsync(stats, stream));
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool bwd_sm90_supported(const BwdParams& p) {
  return (p.D == 64 || p.D == 128) && p.Hkv > 0 && p.H % p.Hkv == 0 && p.H < 65536 && p.Hkv < 65536 &&
         aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.dout) && aligned16(p.dq_acc) &&
         aligned16(p.lse2) && aligned16(p.delta);
}

void launch_bwd_main_sm90(const BwdParams& p, int cc, cudaStream_t stream) {
  SEQPAR_CHECK_MSG(bwd_sm90_supported(p),
                 "the sm_90 flash backward needs D 64 or 128 (got " + std::to_string(p.D) + "), H a multiple of Hkv (H=" +
                     std::to_string(p.H) + ", Hkv=" + std::to_string(p.Hkv) +
                     ") and 16-byte aligned q, k, v, dout, dq_acc, lse2, delta");
  SEQPAR_CHECK_MSG(cc == 90, "the sm_90 flash backward runs on compute capability 9.0 only; this device is " +
                                 std::to_string(cc / 10) + "." + std::to_string(cc % 10));
  if (p.Tq == 0 || p.Tk == 0 || p.H == 0) return;
  const bool f16 = p.elem == Elem::kF16;
  if (p.D == 128) {
    if (f16) {
      run<Elem::kF16, 128>(p, stream);
    } else {
      run<Elem::kBf16, 128>(p, stream);
    }
  } else {
    if (f16) {
      run<Elem::kF16, 64>(p, stream);
    } else {
      run<Elem::kBf16, 64>(p, stream);
    }
  }
}

}  // namespace seqpar::cuda_attn
