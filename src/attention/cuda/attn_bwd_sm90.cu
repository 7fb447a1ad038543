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

template <Elem E, int D>
void run(const BwdParams& p, cudaStream_t stream) {
  using S = sm90::BwdShape<D, kStages>;
  static_assert(S::BM == bwd_sm90_bm(D), "the header's query tile is the kernel's");
  const int nqt = (p.Tq + S::BM - 1) / S::BM;
  const int nkt = (p.Tk + S::BN - 1) / S::BN;
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
  kernel<<<dim3(nkt, p.Hkv), S::kThreads, S::kSmem, stream>>>(tq, tdo, tk, tv, tdq, p, stats, stats + nqt, q_runs);
  SEQPAR_LAUNCH_CHECK();
  SEQPAR_CUDA_CHECK(cudaFreeAsync(stats, stream));
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool bwd_sm90_supported(const BwdParams& p) {
  return (p.D == 64 || p.D == 128) && p.Hkv > 0 && p.H % p.Hkv == 0 && p.H < 65536 && p.Hkv < 65536 &&
         aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.dout) && aligned16(p.dq_acc) &&
         aligned16(p.lse2) && aligned16(p.delta) && aligned16(p.dq);  // dq: launch_dq_finish's lane order, 16 bytes
}

void launch_bwd_main_sm90(const BwdParams& p, int cc, cudaStream_t stream) {
  SEQPAR_CHECK_MSG(bwd_sm90_supported(p),
                 "the sm_90 flash backward needs D 64 or 128 (got " + std::to_string(p.D) + "), H a multiple of Hkv (H=" +
                     std::to_string(p.H) + ", Hkv=" + std::to_string(p.Hkv) +
                     ") and 16-byte aligned q, k, v, dout, dq, dq_acc, lse2, delta");
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
