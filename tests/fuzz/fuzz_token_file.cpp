// libFuzzer target: the token-file reader (data/token_file.h): open, then read every document's
// tokens (against a vocabulary) and loss mask as the dataset does.
#include <vector>

#include "data/token_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = seqpar::fuzz::write_scratch("tokens.bin", data, size);
  seqpar::fuzz::refuse_only_by_input_error([&] {
    seqpar::TokenFile f(path);
    std::vector<int32_t> tokens;
    std::vector<uint8_t> mask;
    for (int64_t d = 0; d < f.num_docs(); ++d) {
      const int64_t b = f.doc_begin(d), e = f.doc_end(d);
      if (b < 0 || e < b || e > f.num_tokens()) __builtin_trap();  // the reader's own checks missed it
      tokens.resize(static_cast<size_t>(e - b));
      mask.resize(static_cast<size_t>(e - b));
      f.read_tokens(b, e, tokens.data(), /*vocab_size=*/1000);
      f.read_loss_mask(b, e, mask.data());
    }
  });
  return 0;
}
