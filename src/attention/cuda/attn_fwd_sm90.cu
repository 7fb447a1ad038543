// Host side of the Hopper forward (attn_fwd_sm90.h): tensor maps for the bulk tensor copies, the
// kernel's own per-tile mask statistics, the launch. Shapes (BN 128 keys for both; a producer
// warpgroup that hands the consumers its registers): D=128 two consumer warpgroups (BM 128) taking
// turns (ping-pong), setmaxnreg 24 / 240, 2-slot K and V rings; D=64 three consumer warpgroups
// (BM 192), setmaxnreg 24 / 160, 3-slot rings. Each for bf16 and f16 (FwdParams::elem).
#include "attention/cuda/attn_fwd_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "attention/cuda/attn_fwd_sm90.cuh"
#include "attention/cuda/attn_sm90_tma.h"
#include "core/cuda_check.h"
#include "core/error_base.h"

namespace seqpar::cuda_attn {

namespace {

template <Elem E, int D, int NWG, int STAGES>
void run(const FwdParams& p, cudaStream_t stream) {
  using S = sm90::Shape<D, NWG, STAGES>;
  const int nqt = (p.Tq + S::BM - 1) / S::BM;
  const int nkt = (p.Tk + S::BN - 1) / S::BN;
  // A call without keys reads none: its key maps point at q (any valid 16-byte-aligned tensor).
  const bool no_keys = p.Tk == 0;
  const CUtensorMap tq = token_tensor_map(p.q, E, p.Tq, p.H, D, S::BM, "q");
  const CUtensorMap tk =
      token_tensor_map(no_keys ? p.q : p.k, E, no_keys ? 1 : p.Tk, no_keys ? p.H : p.Hkv, D, S::BN, "k");
  const CUtensorMap tv =
      token_tensor_map(no_keys ? p.q : p.v, E, no_keys ? 1 : p.Tk, no_keys ? p.H : p.Hkv, D, S::BN, "v");

  // [nqt] query tiles, then [nkt] key tiles; after them the key tiles' run flags (launch_tile_stats).
  const int nk = std::max(nkt, 1);
  int4* stats = nullptr;
  SEQPAR_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&stats), sizeof(int4) * (nqt + nk) + sizeof(int32_t) * nk,
                                    stream));
  int32_t* k_runs = reinterpret_cast<int32_t*>(stats + nqt + nk);
  launch_tile_stats(stats, p.q_seg, p.q_pos, p.Tq, S::BM, stream);
  launch_tile_stats(stats + nqt, p.k_seg, p.k_pos, p.Tk, S::BN, stream, k_runs);

  auto kernel = sm90::fwd_sm90_kernel<E, D, NWG, STAGES>;
  SEQPAR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
  kernel<<<dim3(nqt, p.H), S::kThreads, S::kSmem, stream>>>(tq, tk, tv, p, stats, stats + nqt, k_runs);
  SEQPAR_LAUNCH_CHECK();
  SEQPAR_CUDA_CHECK(cudaFreeAsync(stats, stream));
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool fwd_sm90_supported(const FwdParams& p) {
  return (p.D == 64 || p.D == 128) && p.Hkv > 0 && p.H % p.Hkv == 0 && p.H < 65536 && aligned16(p.q) &&
         aligned16(p.k) && aligned16(p.v);
}

void launch_fwd_sm90(const FwdParams& p, int cc, cudaStream_t stream) {
  SEQPAR_CHECK_MSG(fwd_sm90_supported(p), "the sm_90 flash forward needs D 64 or 128 (got " + std::to_string(p.D) +
                                        "), H a multiple of Hkv (H=" + std::to_string(p.H) + ", Hkv=" +
                                        std::to_string(p.Hkv) + ") and 16-byte aligned q, k, v");
  SEQPAR_CHECK_MSG(cc == 90, "the sm_90 flash forward runs on compute capability 9.0 only; this device is " +
                                 std::to_string(cc / 10) + "." + std::to_string(cc % 10));
  if (p.Tq == 0 || p.H == 0) return;
  const bool f16 = p.elem == Elem::kF16;
  if (p.D == 128) {
    if (f16) {
      run<Elem::kF16, 128, 2, 2>(p, stream);
    } else {
      run<Elem::kBf16, 128, 2, 2>(p, stream);
    }
  } else {
    if (f16) {
      run<Elem::kF16, 64, 3, 3>(p, stream);
    } else {
      run<Elem::kBf16, 64, 3, 3>(p, stream);
    }
  }
}

}  // namespace seqpar::cuda_attn
