// Reading the files a user hands seqpar (configs, tokenizers, checkpoint state, indexes): the one
// place that decides what may be read and how much.
//
// A file is read only when it is a regular file (not a directory, a FIFO, a terminal or a device
// such as /dev/zero, which would block or never end) and no larger than the cap of its kind; the
// cap is named in the error. JSON text is refused when it nests deeper than kMaxJsonDepth: the
// parser itself is iterative, but printing, copying and comparing a value recurse once per level,
// and tens of thousands of levels overflow the stack on the error path.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace seqpar {

// What a file is, for messages and for its size cap.
struct InputKind {
  const char* name;    // "config file", "tokenizer", ...
  uint64_t max_bytes;  // larger files are refused
};

// Configs (HF config.json, DeepSpeed JSON, Accelerate YAML, tokenizer_config.json, a checkpoint's
// trainer_state.json and small text files): real ones are kilobytes.
inline constexpr InputKind kConfigInput{"config file", uint64_t{16} << 20};
inline constexpr InputKind kDeepSpeedConfigInput{"DeepSpeed config", kConfigInput.max_bytes};
inline constexpr InputKind kAccelerateConfigInput{"Accelerate config", kConfigInput.max_bytes};
// Tokenizers (tokenizer.json of the largest vocabularies is ~35 MB; SentencePiece models ~5 MB).
inline constexpr InputKind kTokenizerInput{"tokenizer file", uint64_t{1} << 30};
// A sharded checkpoint's model.safetensors.index.json (a few MB for the largest models).
inline constexpr InputKind kIndexInput{"checkpoint index", uint64_t{256} << 20};

// JSON deeper than this is refused (real configs nest < 10 levels; tokenizer.json < 10).
inline constexpr int kMaxJsonDepth = 256;

// Checks that `path` is a regular file of at most kind.max_bytes; returns its size. InputError
// naming the path, what it is and the rule otherwise.
uint64_t check_input_file(const std::string& path, const InputKind& kind);

// The whole file, after check_input_file; a file that grows past the cap while read is refused.
std::string read_input_file(const std::string& path, const InputKind& kind);

// Opens `path` for reading (O_RDONLY, never blocking on a FIFO) and checks that it is a regular
// file; returns the descriptor (the caller closes it) and its size in *size.
int open_input_file(const std::string& path, const InputKind& kind, uint64_t* size);

// InputError when `text` (JSON) nests arrays and objects deeper than max_depth; `source` names
// the file in the message.
void check_json_depth(std::string_view text, const std::string& source, int max_depth = kMaxJsonDepth);

// read_input_file, then check_json_depth: the text of a JSON file, safe to parse and print.
std::string read_json_text(const std::string& path, const InputKind& kind, const std::string& source);

// check_json_depth, then nlohmann's parser; a syntax error is an InputError
// "<source>: not valid JSON: ...".
nlohmann::json parse_json_input(std::string_view text, const std::string& source);

// The same for YAML: flow collections ([ ], { }) deeper than max_depth are refused (yaml-cpp's
// parser recurses once per level; block nesting is bounded by the file's size cap).
void check_yaml_depth(std::string_view text, const std::string& source, int max_depth = kMaxJsonDepth);

}  // namespace seqpar
