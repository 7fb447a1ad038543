// cuDNN's fused scaled-dot-product attention (its flash-attention engines; wgmma/TMA kernels on
// Hopper) through the backend graph API (cudnn_graph.h), for the calls attention_backend.h's
// packed_docs() accepts: one packed stream of documents attending within themselves, causal or
// not, MHA or GQA, bf16 or fp16 (HALF, an fp16 run's), head dim 64, 96 or 128 (cuDNN's fused flash engines take 16-bit
// head dims up to 128 in multiples of 8). attention_cuda.cpp decides when to call it.
//
// The graphs are the ones cuDNN's fused SDPA engines recognise (the op pattern of NVIDIA's
// cudnn-frontend "composite" SDPA nodes, written out against the backend API):
//   forward   S = (Q K^T) * scale -> padding mask (seq_len) -> [causal: row >= col] ->
//             softmax with Stats = max + log(sum exp(S - max)) -> O = P V
//   backward  the same S recomputed from Stats, dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O))
//             * scale, dK = dS^T Q, dQ = dS K (through an f32 accumulator)
// Tokens are addressed as ragged ("THD") tensors: document b starts at element offset cu[b] * H * D
// of q [T, H, D] (cu[b] * Hkv * D of k/v), so seqpar's token-major buffers are used in place.
// A batch of ONE document gets a dense graph instead (what PyTorch's SDPA builds: [1, H, T, D]
// views of the same buffers, no ragged offsets, no padding mask; the causal mask is cuDNN's
// top-left one, exact because packed_docs() guarantees positions increase with the index), unless
// the policy says CudnnDense::kOff; when cuDNN has no dense plan, the ragged graph runs.
//
// Numerics: Stats is the natural-log log-sum-exp of the scaled scores, f32, in place in our
// lse [T, H] (ragged, stride H per token): exactly attention.h's lse. Outputs and gradients are
// in q's 16-bit type, bf16 or f16, as is P for the second GEMM (f32 accumulation inside cuDNN). Each document sees at
// least itself, so no row is empty.
//
// Plans are built once per (documents, longest document rounded up to a power of two, H, Hkv, D,
// causal, 16-bit type), or per (T, H, Hkv, D, causal, 16-bit type) for a dense graph, and cached per thread and device;
// building one takes cuDNN's heuristics plus, the first time, its kernel compilation (tens to
// hundreds of ms). A cached call does no host synchronisation and no cudaMalloc (scratch comes
// from the caching pool; a ragged call uploads its ~100 bytes of offsets, staged asynchronously).
#pragma once

#include <cstdint>
#include <string>

#include "attention/attention.h"
#include "attention/attention_backend.h"

namespace seqpar::cuda_attn {

// attention.h's attn_forward through cuDNN for `docs` (from packed_docs on the same args):
// out [T, H, D] in q's type (=), lse f32 [T, H] (=). Returns the graph that ran (kCudnnDense or
// kCudnnRagged), or kNone, having written nothing, when cuDNN has no plan for the shape (the
// reason is logged at warn level once per shape); the caller then runs the flash kernel. q/k/v
// bf16 or f16 alike, already checked by the caller. args.policy.cudnn_dense picks the graph of one document.
AttnPath cudnn_attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttnArgs& args, const PackedDocs& docs);

// attention.h's attn_backward through cuDNN, gradients in q's 16-bit type (or f32, through scratch). kAccumulate: dq +=
// , dk += , dv += (cuDNN writes scratch buffers that are then added, three extra passes). kWrite: dq = , dk = , dv = ,
// cuDNN writing straight into them (16-byte aligned; otherwise scratch and a copy). out/lse are the final forward
// results, from either backend (same contract). Returns the graph that ran, or kNone, having written nothing, when
// cuDNN has no plan for the shape.
AttnPath cudnn_attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args,
                         const PackedDocs& docs, GradMode mode = GradMode::kAccumulate);

// The version of the cuDNN library loaded at run time (e.g. 91900), 0 when it cannot be loaded.
int64_t cudnn_runtime_version();

// Builds the forward and backward plans for one shape against a device described by cuDNN's
// device-properties JSON (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION), without a GPU: the graphs
// and cuDNN's support for them are checked on any machine with the library. `dense`: the dense
// graph of one document of max_len tokens (num_docs must be 1). Returns "" on success, else what
// failed.
std::string cudnn_check_plans_offline(const std::string& device_json, int64_t num_docs, int64_t max_len, int64_t H,
                                      int64_t Hkv, int64_t D, bool causal, bool dense = false);

// A device-properties JSON for an H200 SXM (132 SMs, sm_90), for cudnn_check_plans_offline.
std::string cudnn_h200_device_json();

}  // namespace seqpar::cuda_attn
