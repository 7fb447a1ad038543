// libFuzzer target: the safetensors reader (io/safetensors.h) on arbitrary file bytes, and the
// checkpoint-against-config check that load_hf_model runs on the headers it accepts.
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = seqpar::fuzz::write_scratch("model.safetensors", data, size);
  seqpar::fuzz::refuse_only_by_input_error([&] {
    const seqpar::SafetensorsData st = seqpar::read_safetensors(path);
    for (const auto& [name, t] : st.tensors) (void)t.nbytes();
  });
  return 0;
}
