// libFuzzer target: loading a tokenizer.json (io/tokenizer.h), then encoding and decoding sample
// texts with what loads: every id must be in [0, vocab_size()) and decode must take them back.
#include "fuzz_util.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = seqpar::fuzz::write_scratch("tokenizer.json", data, size);
  seqpar::fuzz::refuse_only_by_input_error([&] {
    const auto tok = seqpar::Tokenizer::load(path);
    for (const char* text : {"Hello world! 123 it's  <|eot_id|> \xc3\xa9\n\n x", "", " ", "aaaaaaaa"}) {
      for (bool special : {false, true}) {
        std::vector<int64_t> starts;
        const std::vector<int32_t> ids = tok->encode(text, special, &starts);
        for (int32_t id : ids)
          if (id < 0 || id >= tok->vocab_size()) __builtin_trap();  // an id outside the vocabulary
        (void)tok->decode(ids, false);
        (void)tok->decode(ids, true);
      }
    }
    (void)tok->summary();
  });
  return 0;
}
