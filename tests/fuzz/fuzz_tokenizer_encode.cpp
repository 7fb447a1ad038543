// libFuzzer target: encoding arbitrary text (invalid UTF-8 included) with the committed fixture
// tokenizers (byte-level BPE: GPT-2 and Llama-3 style; SentencePiece when built with it). Invalid
// UTF-8 must be an InputError; valid text must encode to ids in range, with starts that do not
// decrease, and decode without error.
#include "fuzz_util.h"
#include "io/tokenizer.h"

#ifndef SEQPAR_SOURCE_DIR
#error "SEQPAR_SOURCE_DIR must name the source tree (the fixtures)"
#endif

namespace {

std::vector<std::shared_ptr<const seqpar::Tokenizer>> load_fixtures() {
  std::vector<std::shared_ptr<const seqpar::Tokenizer>> out;
  const std::string dir = std::string(SEQPAR_SOURCE_DIR) + "/tests/fixtures/tokenizer/";
  for (const char* f :
       {"gpt2/tokenizer.json", "llama3/tokenizer.json", "gpt2_prefix/tokenizer.json", "qwen2_nfc/tokenizer.json",
        "qwen2_nfkc/tokenizer.json", "llama2/tokenizer.json", "metaspace/tokenizer.json"})
    out.push_back(seqpar::Tokenizer::load(dir + f));
  if (seqpar::tokenizer_detail::sentencepiece_available())
    out.push_back(seqpar::Tokenizer::load(dir + "sentencepiece/tokenizer.model"));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizers = load_fixtures();
  const std::string_view text = seqpar::fuzz::as_text(data, size);
  for (const auto& tok : tokenizers) {
    seqpar::fuzz::refuse_only_by_input_error([&] {
      for (bool special : {false, true}) {
        std::vector<int64_t> starts;
        const std::vector<int32_t> ids = tok->encode(text, special, &starts);
        if (starts.size() != ids.size()) __builtin_trap();
        for (size_t i = 0; i < ids.size(); ++i) {
          if (ids[i] < 0 || ids[i] >= tok->vocab_size()) __builtin_trap();
          if (starts[i] < 0 || starts[i] > static_cast<int64_t>(text.size())) __builtin_trap();
          if (i > 0 && starts[i] < starts[i - 1]) __builtin_trap();
        }
        (void)tok->decode(ids, special);
      }
    });
  }
  return 0;
}
