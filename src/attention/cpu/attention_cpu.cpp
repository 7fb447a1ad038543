#include "attention/cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace seqpar::cpu_attn {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <typename Real>
double dot(const Real* a, const Real* b, int64_t D) {
  double s = 0;
  for (int64_t d = 0; d < D; ++d) s += static_cast<double>(a[d]) * static_cast<double>(b[d]);
  return s;
}

// Keys grouped into runs of consecutive tokens of one segment, with the run's smallest and largest
// position, so a query skips whole runs it cannot see (another document, entirely in its future,
// or entirely before its window) instead of testing every key: a packed batch of B documents then
// costs ~B times less.
struct KeyRun {
  int64_t begin, end;
  int32_t seg, min_pos, max_pos;
};

std::vector<KeyRun> key_runs(const AttnMask& mask, int64_t Tk) {
  std::vector<KeyRun> runs;
  for (int64_t j = 0; j < Tk; ++j) {
    if (runs.empty() || runs.back().seg != mask.seg_k[j] || runs.back().end != j) {
      runs.push_back({j, j + 1, mask.seg_k[j], mask.pos_k[j], mask.pos_k[j]});
    } else {
      runs.back().end = j + 1;
      runs.back().min_pos = std::min(runs.back().min_pos, mask.pos_k[j]);
      runs.back().max_pos = std::max(runs.back().max_pos, mask.pos_k[j]);
    }
  }
  return runs;
}

// The keys query i sees, in increasing key order.
void visible_keys(std::vector<int64_t>& keys, const std::vector<KeyRun>& runs, const AttnMask& mask, int64_t i) {
  keys.clear();
  for (const KeyRun& run : runs) {
    if (run.seg != mask.seg_q[i] || (mask.causal && run.min_pos > mask.pos_q[i])) continue;
    if (mask.window > 0 && static_cast<int64_t>(mask.pos_q[i]) - run.max_pos >= mask.window) continue;
    for (int64_t j = run.begin; j < run.end; ++j)
      if (mask.visible(i, j)) keys.push_back(j);
  }
}

}  // namespace

template <typename Real>
void attn_forward(Real* out, Real* lse, const Real* q, const Real* k, const Real* v, const AttnMask& mask,
                  int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, double scale) {
  const int64_t group = H / Hkv;  // query heads per KV head
  const std::vector<KeyRun> runs = key_runs(mask, Tk);
  std::vector<int64_t> keys;                           // the visible keys of one query row
  std::vector<double> score(static_cast<size_t>(Tk));  // their scaled scores
  std::vector<double> acc(static_cast<size_t>(D));     // sum_j p_j v_j
  for (int64_t i = 0; i < Tq; ++i) {
    visible_keys(keys, runs, mask, i);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      const Real* q_ih = q + (i * H + h) * D;
      Real* out_ih = out + (i * H + h) * D;

      // pass 1: scores of visible keys and their maximum
      double maxval = kNegInf;
      for (size_t n = 0; n < keys.size(); ++n) {
        score[n] = scale * dot(q_ih, k + (keys[n] * Hkv + hk) * D, D);
        maxval = std::max(maxval, score[n]);
      }
      if (maxval == kNegInf) {  // no visible key: an empty row, not a NaN
        std::fill(out_ih, out_ih + D, Real(0));
        lse[i * H + h] = static_cast<Real>(kNegInf);
        continue;
      }

      // pass 2: max-subtracted exponentials, their sum and the weighted sum of values
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t n = 0; n < keys.size(); ++n) {
        const double p = std::exp(score[n] - maxval);
        sum += p;
        const Real* v_j = v + (keys[n] * Hkv + hk) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += p * static_cast<double>(v_j[d]);
      }
      for (int64_t d = 0; d < D; ++d) out_ih[d] = static_cast<Real>(acc[d] / sum);
      lse[i * H + h] = static_cast<Real>(maxval + std::log(sum));
    }
  }
}

template <typename Real>
void attn_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q, const Real* k, const Real* v,
                   const Real* out, const Real* lse, const AttnMask& mask, int64_t Tq, int64_t Tk, int64_t H,
                   int64_t Hkv, int64_t D, double scale) {
  const int64_t group = H / Hkv;
  // One KV head at a time, so that the dk/dv sums over all query rows of its group are kept in
  // double and added to the (accumulating) outputs once.
  std::vector<double> dk_acc(static_cast<size_t>(Tk * D));  // (Tk, D) of KV head hk
  std::vector<double> dv_acc(static_cast<size_t>(Tk * D));  // (Tk, D)
  std::vector<double> dq_acc(static_cast<size_t>(D));       // (D) of row (i, h)
  const std::vector<KeyRun> runs = key_runs(mask, Tk);
  std::vector<int64_t> keys;
  for (int64_t hk = 0; hk < Hkv; ++hk) {
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    for (int64_t i = 0; i < Tq; ++i) {
      visible_keys(keys, runs, mask, i);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const double lse_ih = static_cast<double>(lse[i * H + h]);
        if (lse_ih == kNegInf) continue;  // the row saw no key at all: out = 0, no gradient
        const Real* q_ih = q + (i * H + h) * D;
        const Real* dout_ih = dout + (i * H + h) * D;
        const double Di = dot(dout_ih, out + (i * H + h) * D, D);
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (const int64_t j : keys) {
          const Real* k_j = k + (j * Hkv + hk) * D;
          const Real* v_j = v + (j * Hkv + hk) * D;
          const double p = std::exp(scale * dot(q_ih, k_j, D) - lse_ih);
          const double dp = dot(dout_ih, v_j, D);
          const double ds = p * (dp - Di);
          double* dk_j = dk_acc.data() + j * D;
          double* dv_j = dv_acc.data() + j * D;
          for (int64_t d = 0; d < D; ++d) {
            dv_j[d] += p * static_cast<double>(dout_ih[d]);
            dq_acc[d] += ds * static_cast<double>(k_j[d]);
            dk_j[d] += ds * static_cast<double>(q_ih[d]);
          }
        }
        Real* dq_ih = dq + (i * H + h) * D;
        for (int64_t d = 0; d < D; ++d) dq_ih[d] += static_cast<Real>(scale * dq_acc[d]);
      }
    }
    for (int64_t j = 0; j < Tk; ++j) {
      Real* dk_j = dk + (j * Hkv + hk) * D;
      Real* dv_j = dv + (j * Hkv + hk) * D;
      for (int64_t d = 0; d < D; ++d) {
        dk_j[d] += static_cast<Real>(scale * dk_acc[j * D + d]);
        dv_j[d] += static_cast<Real>(dv_acc[j * D + d]);
      }
    }
  }
}

template <typename Real>
void attn_merge(Real* out_acc, Real* lse_acc, const Real* out_part, const Real* lse_part, int64_t T, int64_t H,
                int64_t D) {
  for (int64_t r = 0; r < T * H; ++r) {
    const double a = static_cast<double>(lse_acc[r]);
    const double b = static_cast<double>(lse_part[r]);
    Real* o = out_acc + r * D;
    const Real* op = out_part + r * D;
    if (b == kNegInf) {  // empty part: nothing to add (two empties: out 0, whatever o held)
      if (a == kNegInf) std::fill(o, o + D, Real(0));
      continue;
    }
    if (a == kNegInf) {  // empty accumulator: take the part
      std::copy(op, op + D, o);
      lse_acc[r] = lse_part[r];
      continue;
    }
    // Both finite: weights exp(a - lse') and exp(b - lse') computed around the larger one, so
    // neither exponential overflows.
    const double m = std::max(a, b);
    const double lse_new = m + std::log(std::exp(a - m) + std::exp(b - m));
    const double wa = std::exp(a - lse_new);
    const double wb = std::exp(b - lse_new);
    for (int64_t d = 0; d < D; ++d) {
      o[d] = static_cast<Real>(wa * static_cast<double>(o[d]) + wb * static_cast<double>(op[d]));
    }
    lse_acc[r] = static_cast<Real>(lse_new);
  }
}

#define SEQPAR_INSTANTIATE_ATTN_CPU(Real)                                                                      \
  template void attn_forward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const AttnMask&,      \
                                   int64_t, int64_t, int64_t, int64_t, int64_t, double);                     \
  template void attn_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, const Real*, \
                                    const Real*, const Real*, const AttnMask&, int64_t, int64_t, int64_t,    \
                                    int64_t, int64_t, double);                                               \
  template void attn_merge<Real>(Real*, Real*, const Real*, const Real*, int64_t, int64_t, int64_t);

SEQPAR_INSTANTIATE_ATTN_CPU(float)
SEQPAR_INSTANTIATE_ATTN_CPU(double)

#undef SEQPAR_INSTANTIATE_ATTN_CPU

}  // namespace seqpar::cpu_attn
