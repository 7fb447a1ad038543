// The SDPA forward and backward graphs (cudnn_graph.h).
#if defined(SEQPAR_WITH_CUDNN)
#include <cudnn.h>
#if CUDNN_VERSION >= 91100
#include "attention/cuda/cudnn_graph.h"

namespace seqpar::cuda_attn::cudnn_graph {

// cuDNN's status name plus its last detailed message (which names the failing rule).
std::string cudnn_message(cudnnStatus_t status) {
  char last[2048] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string m = cudnnGetErrorString(status);
  if (last[0] != '\0') m += std::string(": ") + last;
  return m;
}

namespace {

// The inputs every graph has: the scale; ragged graphs also the offsets and document lengths.
void common_inputs(Graph& g, const Shape4& s) {
  if (!s.dense) {
    for (int64_t uid : {kRaggedQ, kRaggedKV, kRaggedStats})
      g.tensor(uid, {s.B + 1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT64, false);
    g.tensor(kSeqLenQ, {s.B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, false);
    g.tensor(kSeqLenKV, {s.B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, false);
  }
  g.tensor(kScale, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, 0, /*by_value=*/true);
}

// Scores [B, H, S, S] outside each document's [len, len] corner -> -inf.
int64_t padding_mask(Graph& g, const Shape4& s, int64_t x) {
  const Dims ss{s.B, s.H, s.S, s.S}, st{s.H * s.S * s.S, s.S * s.S, s.S, 1};
  const int64_t row = g.virt(ss, st, CUDNN_DATA_INT32), col = g.virt(ss, st, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, row, x, 0, 0, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, col, x, 0, 0, CUDNN_DATA_INT32, 3);
  const int64_t row_ok = g.virt(ss, st, CUDNN_DATA_BOOLEAN), col_ok = g.virt(ss, st, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, row_ok, row, kSeqLenQ, 0, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, col_ok, col, kSeqLenKV, 0, CUDNN_DATA_BOOLEAN);
  const int64_t keep = g.virt(ss, st, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, keep, row_ok, col_ok, 0, CUDNN_DATA_BOOLEAN);
  const int64_t y = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, g.constant(-std::numeric_limits<float>::infinity()), keep);
  return y;
}

// Top-left causal mask inside each document: key index > query index -> -inf.
int64_t causal_mask(Graph& g, const Shape4& s, int64_t x) {
  const Dims ss{s.B, s.H, s.S, s.S}, st{s.H * s.S * s.S, s.S * s.S, s.S, 1};
  const int64_t row = g.virt(ss, st, CUDNN_DATA_INT32), col = g.virt(ss, st, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, row, x, 0, 0, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, col, x, 0, 0, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.virt(ss, st, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, keep, row, col, 0, CUDNN_DATA_BOOLEAN);
  const int64_t y = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, y, x, g.constant(-std::numeric_limits<float>::infinity()), keep);
  return y;
}

// Scores S = mask((Q K^T) * scale), [B, H, S, S], recomputed the same way in both directions
// (the backward subtracts Stats between the two masks, as cuDNN's pattern expects). A dense graph
// has no padding mask (every row and column is a token).
int64_t masked_scores(Graph& g, const Shape4& s, bool subtract_stats) {
  const Dims ss{s.B, s.H, s.S, s.S}, st{s.H * s.S * s.S, s.S * s.S, s.S, 1};
  const int64_t qk = g.virt(ss, st, CUDNN_DATA_FLOAT), scaled = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.matmul(qk, kQ, kK, s.len(kSeqLenQ), s.len(kSeqLenKV), 0);
  g.pointwise(CUDNN_POINTWISE_MUL, scaled, qk, kScale);
  int64_t x = s.dense ? scaled : padding_mask(g, s, scaled);
  if (subtract_stats) {
    const int64_t centred = g.virt(ss, st, CUDNN_DATA_FLOAT);
    g.pointwise(CUDNN_POINTWISE_SUB, centred, x, kStats);
    x = centred;
  }
  return s.causal ? causal_mask(g, s, x) : x;
}

}  // namespace


// Forward: O = softmax(S) V, Stats = logsumexp(S) per row.
void forward_graph(Graph& g, const Shape4& s) {
  common_inputs(g, s);
  g.tensor(kQ, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, s.ragged(kRaggedQ));
  // K^T: [B, Hkv, D, S] over k [T, Hkv, D].
  g.tensor(kK, {s.B, s.Hkv, s.D, s.S}, {s.S * s.Hkv * s.D, s.D, 1, s.Hkv * s.D}, s.io_type(), false,
           s.ragged(kRaggedKV));
  g.tensor(kV, {s.B, s.Hkv, s.S, s.D}, bshd(s, s.Hkv, s.D), s.io_type(), false, s.ragged(kRaggedKV));
  g.tensor(kO, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, s.ragged(kRaggedQ));
  g.tensor(kStats, {s.B, s.H, s.S, 1}, bshd(s, s.H, 1), CUDNN_DATA_FLOAT, false, s.ragged(kRaggedStats));

  const int64_t x = masked_scores(g, s, /*subtract_stats=*/false);
  const Dims ss{s.B, s.H, s.S, s.S}, st{s.H * s.S * s.S, s.S * s.S, s.S, 1};
  const Dims row{s.B, s.H, s.S, 1}, row_st{s.H * s.S, s.S, 1, 1};
  const int64_t mx = g.virt(row, row_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, mx, x);
  const int64_t centred = g.virt(ss, st, CUDNN_DATA_FLOAT), e = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, centred, x, mx);
  g.pointwise(CUDNN_POINTWISE_EXP, e, centred);
  const int64_t sum = g.virt(row, row_st, CUDNN_DATA_FLOAT), log_sum = g.virt(row, row_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, sum, e);
  g.pointwise(CUDNN_POINTWISE_LOG, log_sum, sum);
  g.pointwise(CUDNN_POINTWISE_ADD, kStats, mx, log_sum);
  const int64_t p = g.virt(ss, st, s.io_type());  // P feeds the second GEMM in the 16-bit type
  g.pointwise(CUDNN_POINTWISE_DIV, p, e, sum);
  g.matmul(kO, p, kV, s.len(kSeqLenQ), 0, s.len(kSeqLenKV));
}

// Backward: dQ, dK, dV (=) from Q, K, V, O, dO, Stats. dQ goes through an f32 accumulator
// (kDQAccum: ragged like dQ, or dense [B, H, S, D] head-major as cudnn-frontend lays it out);
// with GQA, dK and dV are first computed per query head and summed over each group: in a ragged
// graph into kDKFull / kDVFull (the 16-bit type, ragged with the KV offsets, which cuDNN scales by H / Hkv,
// as cudnn-frontend lays them out for ragged inputs), in a dense one inside cuDNN (virtual).
void backward_graph(Graph& g, const Shape4& s) {
  common_inputs(g, s);
  const bool gqa = s.H != s.Hkv;
  // The per-query-head gradient before the group sum: ours (ragged) or cuDNN's (virtual).
  auto full_head = [&](int64_t uid) {
    const Dims full{s.B, s.H, s.S, s.D};
    if (s.dense) return g.virt(full, {s.H * s.S * s.D, s.S * s.D, s.D, 1}, s.io_type());
    g.tensor(uid, full, bshd(s, s.H, s.D), s.io_type(), false, kRaggedKV);
    return uid;
  };
  const int64_t rq = s.ragged(kRaggedQ), rkv = s.ragged(kRaggedKV);
  g.tensor(kQ, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, rq);
  const Dims kt_strides{s.S * s.Hkv * s.D, s.D, 1, s.Hkv * s.D};  // K^T and V^T: [B, Hkv, D, S]
  g.tensor(kK, {s.B, s.Hkv, s.D, s.S}, kt_strides, s.io_type(), false, rkv);
  g.tensor(kV, {s.B, s.Hkv, s.D, s.S}, kt_strides, s.io_type(), false, rkv);
  g.tensor(kO, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, rq);
  g.tensor(kDO, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, rq);
  g.tensor(kStats, {s.B, s.H, s.S, 1}, bshd(s, s.H, 1), CUDNN_DATA_FLOAT, false, s.ragged(kRaggedStats));
  g.tensor(kDQ, {s.B, s.H, s.S, s.D}, bshd(s, s.H, s.D), s.io_type(), false, rq);
  g.tensor(kDK, {s.B, s.Hkv, s.S, s.D}, bshd(s, s.Hkv, s.D), s.io_type(), false, rkv);
  g.tensor(kDV, {s.B, s.Hkv, s.S, s.D}, bshd(s, s.Hkv, s.D), s.io_type(), false, rkv);
  const Dims ss{s.B, s.H, s.S, s.S}, st{s.H * s.S * s.S, s.S * s.S, s.S, 1};
  const Dims st_t{s.H * s.S * s.S, s.S * s.S, 1, s.S};  // the same scores, transposed
  const Dims row{s.B, s.H, s.S, 1}, row_st{s.H * s.S, s.S, 1, 1};

  // softmax_sum = rowsum(dO * O) ("Delta"), an f32 workspace: ragged like Stats, or dense
  // [B, H, S, 1] head-major (cudnn-frontend's layout).
  const int64_t d_o = g.virt({s.B, s.H, s.S, s.D}, {s.H * s.S * s.D, s.S * s.D, s.H * s.D, 1}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, kDO, kO);
  const int64_t delta = g.virt(row, row_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, delta, d_o);
  if (s.dense) {
    g.tensor(kSoftmaxSum, row, row_st, CUDNN_DATA_FLOAT, false);
  } else {
    g.tensor(kSoftmaxSum, row, bshd(s, s.H, 1), CUDNN_DATA_FLOAT, false, kRaggedStats);
  }
  g.pointwise(CUDNN_POINTWISE_MUL, kSoftmaxSum, delta, g.constant(1.f));

  // P = exp(S - Stats); dV = P^T dO.
  const int64_t x = masked_scores(g, s, /*subtract_stats=*/true);
  const int64_t p = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, p, x);
  const int64_t p_t = g.virt(ss, st_t, s.io_type());
  g.reshape(p_t, p);
  const Dims full{s.B, s.H, s.S, s.D};
  if (!gqa) {
    g.matmul(kDV, p_t, kDO, s.len(kSeqLenKV), 0, s.len(kSeqLenQ));
  } else {
    const int64_t dv_full = full_head(kDVFull);
    g.matmul(dv_full, p_t, kDO, s.len(kSeqLenKV), 0, s.len(kSeqLenQ));
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, kDV, dv_full);
  }

  // dS = P (dO V^T - Delta) * scale; dK = dS^T Q.
  const int64_t dp = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.matmul(dp, kDO, kV, s.len(kSeqLenQ), s.len(kSeqLenKV), 0);
  const int64_t centred = g.virt(ss, st, CUDNN_DATA_FLOAT), weighted = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, centred, dp, kSoftmaxSum);
  g.pointwise(CUDNN_POINTWISE_MUL, weighted, centred, p);
  const int64_t ds = g.virt(ss, st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, ds, weighted, kScale);
  const int64_t ds_t = g.virt(ss, st_t, s.io_type());
  g.reshape(ds_t, ds);
  if (!gqa) {
    g.matmul(kDK, ds_t, kQ, s.len(kSeqLenKV), 0, s.len(kSeqLenQ));
  } else {
    const int64_t dk_full = full_head(kDKFull);
    g.matmul(dk_full, ds_t, kQ, s.len(kSeqLenKV), 0, s.len(kSeqLenQ));
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, kDK, dk_full);
  }

  // dQ = dS K, through the f32 accumulator.
  const int64_t k_rows = g.virt({s.B, s.Hkv, s.S, s.D}, bshd(s, s.Hkv, s.D), CUDNN_DATA_FLOAT, rkv);
  g.reshape(k_rows, kK);
  if (s.dense) {
    g.tensor(kDQAccum, full, {s.H * s.S * s.D, s.S * s.D, s.D, 1}, CUDNN_DATA_FLOAT, false);
  } else {
    g.tensor(kDQAccum, full, bshd(s, s.H, s.D), CUDNN_DATA_FLOAT, false, kRaggedQ);
  }
  g.matmul(kDQAccum, ds, k_rows, s.len(kSeqLenQ), 0, s.len(kSeqLenKV));
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQ, kDQAccum);
}

}  // namespace seqpar::cuda_attn::cudnn_graph
#endif
#endif
