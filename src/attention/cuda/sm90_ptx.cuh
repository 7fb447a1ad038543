// Hopper PTX helpers shared by the sm_90a attention kernels (attn_fwd_sm90.cuh, attn_bwd_sm90.cuh):
// thin inline-asm wrappers, no policy. Each group and what it needs:
//   mbarriers       mbarrier.init / arrive / arrive.expect_tx / try_wait.parity on shared::cta
//                   barriers, fence.mbarrier_init and fence.proxy.async: PTX ISA 8.0 (try_wait
//                   from 7.8), sm_90 (transaction counts and these fences are Hopper features).
//   tensor copies   cp.async.bulk.tensor.3d (the tensor memory accelerator, TMA) completing on an
//                   mbarrier's transaction count: PTX ISA 8.0, sm_90; the CUtensorMap comes from
//                   attn_sm90_tma.h.
//   descriptors     smem_desc, the 64-bit shared-memory matrix descriptor wgmma reads (128-byte
//                   swizzle): sm_90a.
//   warpgroup MMA   wgmma.fence / commit_group / wait_group and the mma_async wrappers (bf16 or
//                   f16 in, the Elem template argument; f32 accumulators; one asm statement per
//                   type, since an asm template is a string literal): PTX ISA 8.0, sm_90a only (the arch-specific `a`
//                   target; callers guard their bodies with __CUDA_ARCH_FEAT_SM90_ALL). reg_fence emits no instruction:
//                   it only orders accumulator accesses around the asynchronous MMAs.
// Helpers only the backward uses (1-D bulk copies) stay in attn_bwd_sm90.cuh.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attention/cuda/attn_launch.h"  // Elem

namespace seqpar::cuda_attn::sm90 {

// ---- mbarriers and the tensor memory accelerator ------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts its phase
// "before 0", parity 1, as completed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Box (c0, c1, c2) of a 3-D tensor map into shared memory at dst, completing bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// ---- warpgroup MMA ------------------------------------------------------------------------
// Shared-memory matrix descriptor: start address, leading / stride byte offsets (all >> 4),
// 128-byte swizzle (mode 1 in bits 62-63); base offset 0 (tiles are 1024-byte aligned).
//   K-major operand (Q, K): rows of 128 bytes, SBO = 1024 (8-row groups); LBO unused (1).
//   MN-major operand (V): 8 key rows of 128 bytes = 64 columns; SBO = 1024 between 8-key groups,
//   LBO = distance between the 64-column halves.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}
// desc with its start address moved by `bytes` (a multiple of 16). The address field (bits 0-13: the shared address
// >> 4) of a descriptor inside the shared window does not carry into the leading byte offset while the moved address
// stays inside it (below 256 KB), so only the low word changes: one integer add per wgmma in the kernels' loops
// instead of the mask, shift and or of smem_desc for every operand.
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + (bytes >> 4));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups are pending (the oldest complete first).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Named barriers (0 is __syncthreads): bar.sync waits until `threads` threads (a multiple of 32)
// have arrived, counting itself; bar.arrive counts without waiting.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulators of an m64nN wgmma, d[0 .. N / 2) as f32 registers: their operand numbers in the
// instruction (%0 .. %31 for n64, %0 .. %63 for n128, %0 .. %127 for n256) and their read-write operands ("+f"). The
// instruction macros below are built from these.
#define SEQPAR_WGMMA_REGS32                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SEQPAR_WGMMA_REGS64                                                            \
  SEQPAR_WGMMA_REGS32                                                                  \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SEQPAR_WGMMA_ACC32                                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define SEQPAR_WGMMA_ACC64                                                                                       \
  SEQPAR_WGMMA_ACC32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
      "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]),    \
      "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),    \
      "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),    \
      "+f"(d[63])

#define SEQPAR_WGMMA_REGS128                                                                                          \
  SEQPAR_WGMMA_REGS64                                                                                                 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"                                  \
  ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"                                  \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"                      \
  ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define SEQPAR_WGMMA_ACC128                                                                                           \
  SEQPAR_WGMMA_ACC64,                                                                                                 \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),         \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),         \
      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),         \
      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),         \
      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),     \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d (m64 x nN f32, N = 64, 128 or 256) = (scale_d ? d : 0) + A B; A [64 x 16] and B [16 x N] from shared memory
// (descriptors a, b); TA / TB: the transpose bits (0: K-major, 1: MN-major). At N = 256 one instruction reads A
// once for 256 columns. NS: N as text; AB, B1, SC, T1, T2: the operand numbers of a, b, scale_d, TA, TB (after the
// N / 2 accumulators, which come last, as a list with commas).
#define SEQPAR_WGMMA_SS_ASM(NS, TY, REGS, AB, B1, SC, T1, T2, ...)                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                             \
               "wgmma.mma_async.sync.aligned.m64n" NS "k16.f32." TY "." TY " {" REGS "}, "     \
               "%" #AB ", %" #B1 ", p, 1, 1, %" #T1 ", %" #T2 ";\n}\n"                        \
               : __VA_ARGS__                                                                   \
               : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB))
#define SEQPAR_WGMMA_SS_TYPED(NS, REGS, AB, B1, SC, T1, T2, ...)                \
  if constexpr (E == Elem::kF16) {                                              \
    SEQPAR_WGMMA_SS_ASM(NS, "f16", REGS, AB, B1, SC, T1, T2, __VA_ARGS__);      \
  } else {                                                                      \
    SEQPAR_WGMMA_SS_ASM(NS, "bf16", REGS, AB, B1, SC, T1, T2, __VA_ARGS__);     \
  }
template <Elem E, int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_ss: n64, n128 or n256");
  if constexpr (N == 64) {
    SEQPAR_WGMMA_SS_TYPED("64", SEQPAR_WGMMA_REGS32, 32, 33, 34, 35, 36, SEQPAR_WGMMA_ACC32)
  } else if constexpr (N == 128) {
    SEQPAR_WGMMA_SS_TYPED("128", SEQPAR_WGMMA_REGS64, 64, 65, 66, 67, 68, SEQPAR_WGMMA_ACC64)
  } else {
    SEQPAR_WGMMA_SS_TYPED("256", SEQPAR_WGMMA_REGS128, 128, 129, 130, 131, 132, SEQPAR_WGMMA_ACC128)
  }
}
#undef SEQPAR_WGMMA_SS_TYPED
#undef SEQPAR_WGMMA_SS_ASM

// d (m64 x n128 f32) += A B; A [64 x 16] E in registers (per warp the mma.m16n8k16 A layout), B
// [16 x 128] from shared memory, MN-major (transposed; descriptor b).
#define SEQPAR_WGMMA_RS_N128_TB_ASM(TY)                                                 \
  asm volatile(                                                                         \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                      \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" SEQPAR_WGMMA_REGS64 \
      "}, "                                                                             \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                     \
      : SEQPAR_WGMMA_ACC64                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
template <Elem E>
__device__ __forceinline__ void wgmma_rs_n128_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (E == Elem::kF16) {
    SEQPAR_WGMMA_RS_N128_TB_ASM("f16");
  } else {
    SEQPAR_WGMMA_RS_N128_TB_ASM("bf16");
  }
}
#undef SEQPAR_WGMMA_RS_N128_TB_ASM

// d (m64 x n64 f32) += A B; A [64 x 16] E in registers (per warp the mma.m16n8k16 A layout), B
// [16 x 64] from shared memory, MN-major (transposed; descriptor b).
#define SEQPAR_WGMMA_RS_N64_TB_ASM(TY)                                                 \
  asm volatile(                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" SEQPAR_WGMMA_REGS32 \
      "}, "                                                                            \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                    \
      : SEQPAR_WGMMA_ACC32                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
template <Elem E>
__device__ __forceinline__ void wgmma_rs_n64_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (E == Elem::kF16) {
    SEQPAR_WGMMA_RS_N64_TB_ASM("f16");
  } else {
    SEQPAR_WGMMA_RS_N64_TB_ASM("bf16");
  }
}
#undef SEQPAR_WGMMA_RS_N64_TB_ASM

}  // namespace seqpar::cuda_attn::sm90
