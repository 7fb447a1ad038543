// libFuzzer target: the HF config.json parser (io/hf_config.h), and its writer on what it accepts
// (a parsed config must write and parse back to the same config).
#include "fuzz_util.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  seqpar::fuzz::refuse_only_by_input_error([&] {
    const seqpar::LlamaConfig c = seqpar::parse_hf_llama_config(std::string(seqpar::fuzz::as_text(data, size)), "fuzz");
    const seqpar::LlamaConfig back = seqpar::parse_hf_llama_config(seqpar::hf_llama_config_json(c, "float32"), "back");
    if (back.hidden_size != c.hidden_size || back.num_layers != c.num_layers || back.vocab_size != c.vocab_size ||
        back.head_dim != c.head_dim)
      __builtin_trap();  // the writer lost a field the parser read
  });
  return 0;
}
