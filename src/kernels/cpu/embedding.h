// Token embedding, CPU reference: the spec for kernels/cuda/embedding.cu.
#pragma once

#include <cstdint>

namespace seqpar::cpu {

// Throws InputError naming the first token whose id is outside [0, V): its index, the id and V.
// An id out of range means the data was tokenized for a larger vocabulary than the model's.
void check_token_ids(const int32_t* ids,  // (T)
                     int64_t T, int64_t V);

// out[t, :] = wte[ids[t], :]. Every id is checked (check_token_ids) before anything is written.
template <typename Real>
void embedding_forward(Real* out,           // (T, C)
                       const int32_t* ids,  // (T)
                       const Real* wte,     // (V, C)
                       int64_t T, int64_t C, int64_t V);

// dwte[ids[t], :] += dout[t, :]   (parameter gradient: +=). A token repeated in the batch
// accumulates once per occurrence, in token order. Ids are checked as in the forward.
template <typename Real>
void embedding_backward(Real* dwte,          // (V, C)
                        const Real* dout,    // (T, C)
                        const int32_t* ids,  // (T)
                        int64_t T, int64_t C, int64_t V);

}  // namespace seqpar::cpu
