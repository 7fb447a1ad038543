#include "kernels/cpu/embedding.h"

#include "core/error.h"

namespace seqpar::cpu {

void check_token_ids(const int32_t* ids, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; t++) {
    SEQPAR_INPUT_CHECK(ids[t] >= 0 && ids[t] < V,
                       "embedding: token {} has id {}, outside the vocabulary [0, V={}) (was the data "
                       "tokenized for a larger vocab_size than the model's?)",
                       t, ids[t], V);
  }
}

template <typename Real>
void embedding_forward(Real* out, const int32_t* ids, const Real* wte, int64_t T, int64_t C, int64_t V) {
  check_token_ids(ids, T, V);
  for (int64_t t = 0; t < T; t++) {
    const Real* row = wte + ids[t] * C;
    Real* out_t = out + t * C;
    for (int64_t c = 0; c < C; c++) out_t[c] = row[c];
  }
}

template <typename Real>
void embedding_backward(Real* dwte, const Real* dout, const int32_t* ids, int64_t T, int64_t C, int64_t V) {
  check_token_ids(ids, T, V);
  for (int64_t t = 0; t < T; t++) {
    Real* drow = dwte + ids[t] * C;
    const Real* dout_t = dout + t * C;
    for (int64_t c = 0; c < C; c++) drow[c] += dout_t[c];
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t);

}  // namespace seqpar::cpu
