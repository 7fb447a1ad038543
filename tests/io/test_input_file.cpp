// The one reader of user files (io/input_file.h) and the input classes it closes: non-regular
// files (/dev/zero, a FIFO, a directory) and oversized ones refused before reading; JSON and YAML
// nested tens of thousands of levels deep refused by name instead of overflowing the stack on the
// error path (describe_json / short_json stay bounded even for a value built in memory).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "io/accelerate_config.h"
#include "io/ds_config.h"
#include "io/hf_config.h"
#include "io/input_file.h"
#include "io/json_describe.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::write_bytes;
namespace fs = std::filesystem;

std::string nested(size_t depth, const std::string& open, const std::string& close, const std::string& inner = "1") {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  s += inner;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(InputFile, ReadsARegularFile) {
  const std::string dir = testing::temp_dir(), path = dir + "/a.json";
  write_bytes(path, "{\"a\": 1}");
  EXPECT_EQ(read_input_file(path, kConfigInput), "{\"a\": 1}");
  EXPECT_EQ(check_input_file(path, kConfigInput), 8u);
}

TEST(InputFile, RefusesDevicesDirectoriesAndFifosWithoutReading) {
  EXPECT_INPUT_ERROR(read_input_file("/dev/zero", kConfigInput),
                     "/dev/zero: the config file must be a regular file, but this is a character device");
  const std::string dir = testing::temp_dir();
  EXPECT_INPUT_ERROR(read_input_file(dir, kConfigInput), "this is a directory");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO with no writer would block forever; it must be refused at once.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_INPUT_ERROR(read_input_file(fifo, kConfigInput), "this is a FIFO (pipe)");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_INPUT_ERROR(read_input_file(dir + "/missing", kConfigInput), "cannot open the config file");
}

TEST(InputFile, RefusesAFileAboveItsKindsCap) {
  const std::string path = testing::temp_dir() + "/big.json";
  write_bytes(path, std::string(3 << 20, ' '));
  constexpr InputKind kSmall{"test file", 1 << 20};
  EXPECT_INPUT_ERROR(read_input_file(path, kSmall), "the test file is 3145728 bytes, more than the 1 MiB");
}

TEST(InputFile, EveryConfigLoaderRefusesDevZero) {
  // Each used to read the endless stream whole (until memory ran out).
  EXPECT_INPUT_ERROR(load_ds_config("/dev/zero"), "must be a regular file");
  EXPECT_INPUT_ERROR(load_accelerate_config("/dev/zero"), "must be a regular file");
  const std::string dir = testing::temp_dir();
  fs::create_symlink("/dev/zero", dir + "/config.json");
  EXPECT_INPUT_ERROR(load_hf_llama_config(dir), "must be a regular file");
  EXPECT_INPUT_ERROR(Tokenizer::load("/dev/zero"), "must be a regular file");
}

TEST(JsonDepth, DeepJsonIsRefusedByNameInEveryParser) {
  // 100,000 levels: json::dump() on the error path recursed once per level and overflowed the stack.
  const std::string deep_list = nested(100000, "[", "]");
  const std::string deep_obj = "{\"a\":" + nested(100000, "{\"a\":", "}") + "}";
  EXPECT_INPUT_ERROR(parse_hf_llama_config(deep_list, "config.json"),
                     "config.json: JSON nested more than 256 levels deep");
  EXPECT_INPUT_ERROR(parse_hf_llama_config("{\"hidden_size\":" + deep_list + "}", "config.json"), "nested more than");
  EXPECT_INPUT_ERROR(parse_ds_config(deep_obj, "ds.json"), "ds.json: JSON nested more than 256 levels deep");
  EXPECT_INPUT_ERROR(parse_ds_config("{\"zero_optimization\":" + deep_list + "}", "ds.json"), "nested more than");
  // Brackets inside strings do not count; 256 levels are still accepted by the scan.
  EXPECT_NO_THROW(check_json_depth("[\"" + std::string(1000, '[') + "\"]", "s"));
  EXPECT_NO_THROW(check_json_depth(nested(256, "[", "]"), "s"));
  EXPECT_INPUT_ERROR(check_json_depth(nested(257, "[", "]"), "s"), "at byte 256");
}

TEST(JsonDepth, DeepSafetensorsHeaderIsRefused) {
  // The shape printing of the header check used dump() too.
  const std::string header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":" + nested(50000, "[", "]") + ",\"data_offsets\":[0,4]}}";
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  const std::string path = testing::temp_dir() + "/deep.safetensors";
  write_bytes(path, bytes + header + std::string(4, '\0'));
  EXPECT_INPUT_ERROR(read_safetensors(path), "nested more than 256 levels deep");
}

// A ',' token in block context (a flow indicator outside [ ] and { }) makes yaml-cpp 0.7 loop,
// allocating gigabytes a second, after a document's root node or at the start of a line below it
// (found by fuzz_accelerate_config, 2026-12-04; both inputs are in its seed corpus): refused by the
// scan before yaml-cpp sees it, naming the line. A ',' inside a plain scalar, a block scalar's text
// or a flow list is not a token.
TEST(JsonDepth, ABlockContextCommaIsRefusedBeforeYamlCpp) {
  for (const char* text : {", b: c\n", "  a: 1\n, b: c\n", "# a comment\n,\n", "a: 1\n---\n, b\n",
                           "  a: 1\n , b\n", "'a',\n", "\"a\" ,\n", "[a] ,\n", "{a: 1},\n", "!t ,x\n", "&a ,\n",
                           "!x,b\n", "!*l,\n", "  a: 1\n\"b\",\n", "key: 'v' ,\n", "\"\"\"p\"\"\"&MU\",\"\"sa/",
                           "!:seq_data,_type  \n"}) {
    SCOPED_TRACE(text);
    EXPECT_INPUT_ERROR(parse_accelerate_config(text, "a.yaml", "."), "outside a [ ] or { } list");
  }
  EXPECT_INPUT_ERROR(parse_accelerate_config("num_processes: 2\n, b\n", "a.yaml", "."), "a.yaml: line 2 has a ','");
  // A control character is not YAML (yaml-cpp takes a NUL for a token boundary: "\0,\n\0," looped).
  EXPECT_INPUT_ERROR(parse_accelerate_config(std::string("\0,\xa1\n\0,", 6), "a.yaml", "."),
                     "a.yaml: control character 0x00 at byte 0");
  EXPECT_INPUT_ERROR(parse_accelerate_config("num_processes: 2\x7f\n", "a.yaml", "."), "control character 0x7f");
  EXPECT_NO_THROW(check_yaml_depth("a:\tb\r\nc: d\n", "s"));
  // Quoted scalars span lines, and a quote right after a closing one opens another (as yaml-cpp
  // reads them): the comma after the last one is a token.
  EXPECT_INPUT_ERROR(parse_accelerate_config("#0\n\"\"\"\"\"\"\"\"\"dpa\n\"\"\"\"\"\"\"\"\"dp\"\n\"\"\"\"\"\"\"\",\"\"sa\n",
                                             "a.yaml", "."),
                     "line 4 has a ',' outside a [ ] or { } list");
  EXPECT_NO_THROW(check_yaml_depth("a: \"multi\n  line, with: x\"\nb: 'it''s, ok'\n", "s"));
  // Plain scalars, block scalars (| or >, with indicators) and flow lists keep their commas.
  EXPECT_NO_THROW(check_yaml_depth("a: |\n  , text\n  more\nb: >-\n  , x\nc: 1\n", "s"));
  EXPECT_NO_THROW(check_yaml_depth("a: [1\n, 2]\nb: x, y ,z\nc: {d: 'e', f: [1, 2]}\n\"g\": 1, 2\n", "s"));
  // A '[' or '{' inside a plain word is the word's text, not a list: a later line's ',' is still
  // outside any list (yaml-cpp 0.7 looped on this, found by fuzz_accelerate_config 2026-12-04, the
  // seventh input), and the word keeps its brackets and commas.
  EXPECT_INPUT_ERROR(parse_accelerate_config("f*#e co[nhe Delysses /\n# ALSttue\n, paral para\n|", "a.yaml", "."),
                     "a.yaml: line 3 has a ',' outside a [ ] or { } list");
  EXPECT_INPUT_ERROR(parse_accelerate_config("a: x{y\n, b\n", "a.yaml", "."), "line 2 has a ','");
  // After a space inside the word too (the eighth input: "f*#e [ocnhe ..."); only where a node
  // starts (a line, "- ", ": ", a tag) does a bracket open a list.
  EXPECT_INPUT_ERROR(parse_accelerate_config("f*#e [ocnhe Delysses /\n# ALSttue\n, paral: tra\n|", "a.yaml", "."),
                     "a.yaml: line 3 has a ',' outside a [ ] or { } list");
  EXPECT_INPUT_ERROR(parse_accelerate_config("key: , x\n", "a.yaml", "."), "line 1 has a ','");
  // Inside a plain scalar a quote after a ',' and a '*', '!' or '&' word are text (the ninth input).
  EXPECT_NO_THROW(check_yaml_depth("a: b,\"c d\nx: y *z, w\nk: !t v, u\n", "s"));
  EXPECT_NO_THROW(check_yaml_depth("a: co[n, d\nb: x{y}, z\nc: [p[q, r]]\nd: x [b, c\n", "s"));
  EXPECT_NO_THROW(check_yaml_depth("- [a,\n  b]\n- ? {k: 1,\n    j: 2}\n\"q\": [1,\n 2]\nt: !!seq [1,\n 2]\n", "s"));
  EXPECT_INPUT_ERROR(check_yaml_depth("a: " + nested(300, "[", "]"), "s"), "YAML nested more than");
}

// A path in a config that the filesystem cannot even look up (a name longer than NAME_MAX) is an
// InputError naming the key, not a std::filesystem_error ending in std::terminate (found by
// fuzz_accelerate_config, 2026-12-04).
TEST(AccelerateYaml, AnUncheckablePathIsAnInputError) {
  const std::string yaml =
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " + std::string(5000, 'x') + "\n";
  EXPECT_INPUT_ERROR(parse_accelerate_config(yaml, "a.yaml", "."), "a.yaml: 'deepspeed_config.deepspeed_config_file'=");
}

TEST(JsonDepth, DeepYamlIsRefused) {
  EXPECT_INPUT_ERROR(parse_accelerate_config("num_processes: " + nested(50000, "[", "]"), "a.yaml", "."),
                     "a.yaml: YAML nested more than 256 levels deep");
  EXPECT_INPUT_ERROR(parse_accelerate_config(nested(50000, "{a: ", "}"), "a.yaml", "."), "YAML nested more than");
  std::string block;  // block nesting: one more space per level
  for (int i = 0; i < 300; ++i) block += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  EXPECT_INPUT_ERROR(parse_accelerate_config(block, "a.yaml", "."), "YAML nested more than");
  std::string dashes;  // compact nested sequences on one line
  for (int i = 0; i < 300; ++i) dashes += "- ";
  EXPECT_INPUT_ERROR(parse_accelerate_config(dashes + "x\n", "a.yaml", "."), "YAML nested more than");
  // Quoted brackets and comments do not count.
  EXPECT_NO_THROW(check_yaml_depth("a: '" + std::string(1000, '[') + "' # " + std::string(1000, '{') + "\n", "s"));
}

TEST(JsonDescribe, IsBoundedForAnyValue) {
  // A value nested 100,000 deep built in memory (not parsed): describing it must not recurse.
  nlohmann::json deep = 1;
  for (int i = 0; i < 100000; ++i) deep = nlohmann::json::array({std::move(deep)});
  EXPECT_EQ(describe_json(deep), "list [[[[[...]]]]]");
  EXPECT_EQ(short_json(nlohmann::json(std::string(10000, 'x'))).size(), 60u);
  EXPECT_EQ(describe_json(nlohmann::json::parse("[1,2]")), "list [1,2]");
  EXPECT_EQ(describe_json(nlohmann::json::parse("{\"a\":\"16\"}")), "object {\"a\":\"16\"}");
}

}  // namespace
}  // namespace seqpar
