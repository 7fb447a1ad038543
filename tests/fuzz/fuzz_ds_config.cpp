// libFuzzer target: the DeepSpeed JSON parser (io/ds_config.h).
#include "fuzz_util.h"
#include "io/ds_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  seqpar::fuzz::refuse_only_by_input_error(
      [&] { (void)seqpar::parse_ds_config(std::string(seqpar::fuzz::as_text(data, size)), "fuzz.json"); });
  return 0;
}
