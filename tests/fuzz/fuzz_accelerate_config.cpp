// libFuzzer target: the Accelerate YAML parser (io/accelerate_config.h). A deepspeed_config_file
// it names is looked up in an empty scratch directory (so the target reads no file of the machine
// but the ones it names there, which do not exist).
#include "fuzz_util.h"
#include "io/accelerate_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string base = (seqpar::fuzz::scratch_dir() / "accelerate").string();
  static const bool made = std::filesystem::create_directories(base) || true;
  (void)made;
  seqpar::fuzz::refuse_only_by_input_error([&] {
    (void)seqpar::parse_accelerate_config(std::string(seqpar::fuzz::as_text(data, size)), "fuzz.yaml", base);
  });
  return 0;
}
