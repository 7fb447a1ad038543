// CPU reference attention: raw-pointer kernels, templated on the element type (float for the
// f32 engine path, double for finite-difference tests). These loops are the specification that
// every other attention backend (flash, cuDNN, the sequence-parallel strategies) is checked
// against, so they favour plain, readable code over speed.
//
// Glossary: Tq query tokens, Tk key tokens, H query heads, Hkv KV heads (H % Hkv == 0; query
// head h reads KV head h / (H / Hkv)), D head dim. Layouts are token-major and dense.
//
// Mask (attention/attention.h): query i sees key j iff seg_q[i] == seg_k[j] and
// (not causal or pos_k[j] <= pos_q[i]) and (window == 0 or pos_q[i] - pos_k[j] < window).
//
// Scores are accumulated in double whatever Real is, so the f32 path differs from the f64 path
// only by the rounding of inputs and outputs.
#pragma once

#include <cstdint>

namespace seqpar::cpu_attn {

// The mask metadata of one (query set, key set) pair.
struct AttnMask {
  const int32_t* seg_q;  // (Tq)
  const int32_t* pos_q;  // (Tq)
  const int32_t* seg_k;  // (Tk)
  const int32_t* pos_k;  // (Tk)
  bool causal;
  int32_t window = 0;  // sliding window (causal only); 0 = none

  bool visible(int64_t i, int64_t j) const {
    return seg_q[i] == seg_k[j] && (!causal || pos_k[j] <= pos_q[i]) &&
           (window <= 0 || static_cast<int64_t>(pos_q[i]) - pos_k[j] < window);
  }
};

// out (=), lse (=). For every query row i and head h:
//   s_j = scale * q_i . k_j over visible keys j,  lse = log sum_j exp(s_j),
//   out = sum_j exp(s_j - lse) v_j.
// A row with no visible key gets out = 0 and lse = -inf. Scratch: one row of Tk scores.
template <typename Real>
void attn_forward(Real* out,        // (Tq, H, D)
                  Real* lse,        // (Tq, H)
                  const Real* q,    // (Tq, H, D)
                  const Real* k,    // (Tk, Hkv, D)
                  const Real* v,    // (Tk, Hkv, D)
                  const AttnMask& mask, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, double scale);

// dq (+=), dk (+=), dv (+=): the gradient contributions of the keys given here, computed with
// the FINAL out and lse of each query row (over all keys, after any merge), so that calling it
// once per key block and summing gives the full gradient. Flash-attention backward:
//   Di = dout_i . out_i,  p_ij = exp(scale * q_i . k_j - lse_i),  dp_ij = dout_i . v_j,
//   ds_ij = p_ij (dp_ij - Di),
//   dv_j += p_ij dout_i,  dq_i += scale ds_ij k_j,  dk_j += scale ds_ij q_i.
// Rows with lse = -inf (no visible key anywhere) contribute nothing.
// Scratch: dk/dv of one KV head in double, (Tk, D) each.
template <typename Real>
void attn_backward(Real* dq,          // (Tq, H, D)
                   Real* dk,          // (Tk, Hkv, D)
                   Real* dv,          // (Tk, Hkv, D)
                   const Real* dout,  // (Tq, H, D)
                   const Real* q,     // (Tq, H, D)
                   const Real* k,     // (Tk, Hkv, D)
                   const Real* v,     // (Tk, Hkv, D)
                   const Real* out,   // (Tq, H, D)  final output
                   const Real* lse,   // (Tq, H)     final log-sum-exp
                   const AttnMask& mask, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, double scale);

// In-place log-sum-exp merge of a partial result into an accumulator, per (token, head) row:
//   lse' = log(exp(lse_acc) + exp(lse_part)),
//   out' = out_acc exp(lse_acc - lse') + out_part exp(lse_part - lse').
// -inf means "empty": an empty part leaves the row unchanged, an empty accumulator takes the
// part as is (its out is not read, so it may be uninitialised), two empties give out 0, -inf.
template <typename Real>
void attn_merge(Real* out_acc,         // (T, H, D)
                Real* lse_acc,         // (T, H)
                const Real* out_part,  // (T, H, D)
                const Real* lse_part,  // (T, H)
                int64_t T, int64_t H, int64_t D);

}  // namespace seqpar::cpu_attn
