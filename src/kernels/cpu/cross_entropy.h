// Per-token cross-entropy on pre-shifted targets, CPU reference: the spec for
// kernels/cuda/cross_entropy.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// The target value of a token that contributes no loss (prompt tokens, padding, the last token
// of a sequence after the label shift). Same value as kIgnoreIndex in kernels/ops.h.
inline constexpr int32_t kCrossEntropyIgnore = -100;

// Throws InputError naming the first token whose target is neither kCrossEntropyIgnore nor in
// [0, V): its index, the target and V.
void check_targets(const int32_t* targets,  // (T)
                   int64_t T, int64_t V);

// losses[t] = logsumexp(logits[t, :]) - logits[t, targets[t]], 0 where targets[t] is ignored.
// logsumexp = max + log(sum exp(x - max)), the sum in double, so large logits do not overflow.
// Targets are checked (check_targets) before anything is written. lse, when given, keeps each
// row's logsumexp (0 for an ignored row) for the backward.
template <typename Real>
void cross_entropy_forward(Real* losses,            // (T)
                           const Real* logits,      // (T, V)
                           const int32_t* targets,  // (T)
                           int64_t T, int64_t V,
                           Real* lse = nullptr);  // (T) or null

// dlogits[t, v] = (softmax(logits[t])[v] - (v == targets[t])) * dloss   (=)
// and 0 for every v of an ignored row. dloss = d(total loss) / d(losses[t]), the same for
// every token (1 / number of good tokens in the global batch). The softmax is exp(x - lse) from
// the forward's lse when given (one pass over the row), else recomputed (max-subtracted, sum in
// double). dlogits may be the same buffer as logits: each logit is read before its gradient is
// written (without lse, a row's logits are all read first).
template <typename Real>
void cross_entropy_backward(Real* dlogits,           // (T, V)
                            const Real* logits,      // (T, V)
                            const int32_t* targets,  // (T)
                            Real dloss, int64_t T, int64_t V,
                            const Real* lse = nullptr);  // (T) from the forward, or null

}  // namespace seqpar::cpu
