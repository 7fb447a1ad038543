// LayerNorm forward and backward (the spec: kernels/cpu/layernorm.h), one block per row; f32
// arithmetic on bf16, f16 or f32 storage. The parameter gradients are summed without atomics, in a fixed
// order (norm_common.cuh, shared with rmsnorm.cu): bitwise reproducible.
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/norm_common.cuh"

namespace seqpar::cuda_kernels {

namespace {

// mean[t] = sum(x) / C; rstd[t] = 1 / sqrt(sum((x - mean)^2) / C + eps) from the centred values
// (not E[x^2] - mean^2, which cancels when |mean| >> std); out = (x - mean) * rstd * w + b. The
// row is read three times; the second and third reads hit L1/L2 (a row is a few KB).
template <int N, typename TX, typename TW>
__global__ void layernorm_forward_kernel(TX* __restrict__ out,           // [T, C]
                                         float* __restrict__ mean,       // [T]
                                         float* __restrict__ rstd,       // [T]
                                         const TX* __restrict__ inp,     // [T, C]
                                         const TW* __restrict__ weight,  // [C]
                                         const TW* __restrict__ bias,    // [C]
                                         int64_t C, float eps) {
  __shared__ float scratch[kWarp];
  const int64_t t = blockIdx.x, packs = C / N;
  const TX* x = inp + t * C;
  TX* y = out + t * C;
  float s = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_pack<N>(v, x + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) s += v[k];
  }
  const float m = block_sum(s, scratch) / static_cast<float>(C);
  float ss = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_pack<N>(v, x + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float d = v[k] - m;
      ss += d * d;
    }
  }
  const float r = 1.f / sqrtf(block_sum(ss, scratch) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) {
    mean[t] = m;
    rstd[t] = r;
  }
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N], w[N], b[N];
    load_pack<N>(v, x + p * N);
    load_pack<N>(w, weight + p * N);
    load_pack<N>(b, bias + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = (v[k] - m) * r * w[k] + b[k];
    store_pack<N>(y + p * N, v);
  }
}

// With xhat = (x - mean) * r and g = w * dout:
//   dx_j = r * (g_j - mean_c(g_c) - xhat_j * mean_c(g_c xhat_c)),  dw_c = sum_t dout_c xhat_c,  db_c = sum_t dout_c.
// Block b handles rows b, b + gridDim.x, ... and accumulates dw and db for those rows in shared
// memory, each thread owning fixed columns (stored column-pack-transposed, s[k * packs + p], so a
// warp's accesses hit distinct banks). It writes its partial rows to partials[b] = [dw (C), db (C)];
// norm_params_kernel (norm_common.cuh) sums the partials in a fixed order. No atomics.
// dinp may be dout (in place): each element of dout is last read by the thread that writes its
// dinp element, after the row's sums (block_sum synchronises the block). Accumulate adds dx to
// dinp's values (then dinp is not dout), rounding once.
template <int N, bool Accumulate, typename TX, typename TW>
__global__ void layernorm_backward_kernel(TX* dinp,                        // [T, C]
                                          float* __restrict__ partials,    // [gridDim.x, 2C]
                                          const TX* dout,                  // [T, C]
                                          const TX* __restrict__ inp,      // [T, C]
                                          const TW* __restrict__ weight,   // [C]
                                          const float* __restrict__ mean,  // [T]
                                          const float* __restrict__ rstd,  // [T]
                                          int64_t T, int64_t C) {
  extern __shared__ float s_acc[];  // [2C]: dw, then db
  float* s_dw = s_acc;
  float* s_db = s_acc + C;
  __shared__ float scratch[kWarp];
  const int64_t packs = C / N;
  const float inv_c = 1.f / static_cast<float>(C);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x)
#pragma unroll
    for (int k = 0; k < N; ++k) s_dw[k * packs + p] = s_db[k * packs + p] = 0.f;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const float m = mean[t], r = rstd[t];
    const TX* x = inp + t * C;
    const TX* dy = dout + t * C;
    TX* dx = dinp + t * C;
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[N], gv[N], wv[N];
      load_pack<N>(xv, x + p * N);
      load_pack<N>(gv, dy + p * N);
      load_pack<N>(wv, weight + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float g = wv[k] * gv[k];
        sum_g += g;
        sum_gx += g * ((xv[k] - m) * r);
      }
    }
    const float mean_g = block_sum(sum_g, scratch) * inv_c;
    const float mean_gx = block_sum(sum_gx, scratch) * inv_c;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[N], gv[N], wv[N], o[N];
      load_pack<N>(xv, x + p * N);
      load_pack<N>(gv, dy + p * N);
      load_pack<N>(wv, weight + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xhat = (xv[k] - m) * r;
        o[k] = r * (wv[k] * gv[k] - mean_g - xhat * mean_gx);
        s_dw[k * packs + p] += gv[k] * xhat;
        s_db[k * packs + p] += gv[k];
      }
      if constexpr (Accumulate) {
        float prev[N];
        load_pack<N>(prev, dx + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] += prev[k];
      }
      store_pack<N>(dx + p * N, o);
    }
  }
  float* part = partials + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float w[N], b[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      w[k] = s_dw[k * packs + p];
      b[k] = s_db[k * packs + p];
    }
    store_pack<N>(part + p * N, w);
    store_pack<N>(part + C + p * N, b);
  }
}

}  // namespace

void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, DType x_dt, const void* weight,
                       const void* bias, DType w_dt, int64_t T, int64_t C, float eps, cudaStream_t stream) {
  if (T == 0) return;
  const bool vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias);
  dispatch_float(x_dt, [&](auto tx) {
    dispatch_float(w_dt, [&](auto tw) {
      using TX = decltype(tx);
      using TW = decltype(tw);
      if (vec) {
        layernorm_forward_kernel<8><<<static_cast<unsigned>(T), norm_row_threads(C / 8), 0, stream>>>(
            static_cast<TX*>(out), mean, rstd, static_cast<const TX*>(inp), static_cast<const TW*>(weight),
            static_cast<const TW*>(bias), C, eps);
      } else {
        layernorm_forward_kernel<1><<<static_cast<unsigned>(T), norm_row_threads(C), 0, stream>>>(
            static_cast<TX*>(out), mean, rstd, static_cast<const TX*>(inp), static_cast<const TW*>(weight),
            static_cast<const TW*>(bias), C, eps);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void layernorm_backward(void* dinp, float* dweight, float* dbias, float* partials, const void* dout, const void* inp,
                        DType x_dt, const void* weight, DType w_dt, const float* mean, const float* rstd, int64_t T,
                        int64_t C, bool accumulate, cudaStream_t stream) {
  if (C == 0) return;
  const int blocks = norm_backward_blocks(T);
  const bool vec =
      C % 8 == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) && aligned16(partials);
  const size_t smem = static_cast<size_t>(2 * C) * sizeof(float);
  dispatch_float(x_dt, [&](auto tx) {
    dispatch_float(w_dt, [&](auto tw) {
      using TX = decltype(tx);
      using TW = decltype(tw);
      auto launch = [&](auto kernel, int n) {
        if (smem > 48 * 1024)
          SEQPAR_CUDA_CHECK(
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        kernel<<<blocks, norm_row_threads(C / n), smem, stream>>>(
            static_cast<TX*>(dinp), partials, static_cast<const TX*>(dout), static_cast<const TX*>(inp),
            static_cast<const TW*>(weight), mean, rstd, T, C);
        SEQPAR_LAUNCH_CHECK();
      };
      if (vec) {
        accumulate ? launch(layernorm_backward_kernel<8, true, TX, TW>, 8)
                   : launch(layernorm_backward_kernel<8, false, TX, TW>, 8);
      } else {
        accumulate ? launch(layernorm_backward_kernel<1, true, TX, TW>, 1)
                   : launch(layernorm_backward_kernel<1, false, TX, TW>, 1);
      }
    });
  });
  norm_params_kernel<<<ceil_div(2 * C, kWarp), dim3(kWarp, 8), 0, stream>>>(dweight, dbias, partials, blocks, C, 2 * C);
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace seqpar::cuda_kernels
