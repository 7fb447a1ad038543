// safetensors: round trips, byte compatibility with the Python `safetensors` package, every kind
// of corrupt file, HF checkpoint directories, atomic writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::temp_dir;
using testing::write_bytes;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The 8-byte little-endian length, the header, the data: a file built by hand per the format spec.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Written by Python: safetensors.torch.save({"w": arange(6).float().reshape(2, 3), "a": [1, 2] i64,
// "z": [3] i32, "h": [1.5, -2, 3] bf16, "k": [7] i32}, metadata={"format": "pt"}) (safetensors 0.8.0).
const char* kPythonTorchFile =
    "38010000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c2261223a7b226474797065223a22"
    "493634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c31365d7d2c2277223a7b226474797065223a22"
    "463332222c227368617065223a5b322c335d2c22646174615f6f666673657473223a5b31362c34305d7d2c226b223a7b226474797065"
    "223a22493332222c227368617065223a5b315d2c22646174615f6f666673657473223a5b34302c34345d7d2c227a223a7b2264747970"
    "65223a22493332222c227368617065223a5b315d2c22646174615f6f666673657473223a5b34342c34385d7d2c2268223a7b22647479"
    "7065223a2242463136222c227368617065223a5b335d2c22646174615f6f666673657473223a5b34382c35345d7d7d20202001000000"
    "000000000200000000000000000000000000803f0000004000004040000080400000a0400700000003000000c03f00c04040";

// Written by Python: safetensors.numpy.save({"half": f16 [1, -0.5, 65504, 2^-24, inf, -0, 2^-14,
// 0.333251953125], "dbl": f64 [[1/3, -2.5e10], [1e-300, 7]]}).
const char* kPythonNumpyF16F64File =
    "78000000000000007b2264626c223a7b226474797065223a22463634222c227368617065223a5b322c325d2c22646174615f6f666673"
    "657473223a5b302c33325d7d2c2268616c66223a7b226474797065223a22463136222c227368617065223a5b385d2c22646174615f6f"
    "666673657473223a5b33322c34385d7d7d202020555555555555d53f000000e8764817c259f3f8c21f6ea5010000000000001c40003c"
    "00b8ff7b0100007c008000045535";

std::vector<std::pair<std::string, Tensor>> python_example_tensors() {
  std::vector<float> w = {0, 1, 2, 3, 4, 5};
  std::vector<float> h = {1.5f, -2.f, 3.f};
  return {{"w", Tensor::from_vector<float>({2, 3}, w)},
          {"a", Tensor::from_vector<int64_t>({2}, {1, 2})},
          {"z", Tensor::from_vector<int32_t>({1}, {3})},
          {"h", Tensor::from_vector<float>({3}, h).to_dtype(DType::kBF16)},
          {"k", Tensor::from_vector<int32_t>({1}, {7})}};
}

TEST(Safetensors, RoundTripEveryDtype) {
  const std::string path = temp_dir() + "/t.safetensors";
  std::vector<std::pair<std::string, Tensor>> in = {
      {"f32", testing::random_tensor({3, 5}, 1)},
      {"bf16", testing::random_tensor({7}, 2).to_dtype(DType::kBF16)},
      {"i32", Tensor::from_vector<int32_t>({2, 2}, {-1, 0, 2147483647, -2147483647 - 1})},
      {"i64", Tensor::from_vector<int64_t>({3}, {std::numeric_limits<int64_t>::min(), 42, int64_t{1} << 40})},
      {"scalar", Tensor::from_vector<float>({}, {3.5f})},
      {"empty", Tensor::empty({0, 4}, DType::kF32)},
      {"odd_bf16", testing::random_tensor({3}, 3).to_dtype(DType::kBF16)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" and ünïcode"}};
  write_safetensors(path, in, meta);
  SafetensorsData out = read_safetensors(path);

  EXPECT_EQ(out.path, path);
  EXPECT_EQ(out.metadata, meta);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    const Tensor* r = out.find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_TRUE(same_bytes(*r, t)) << name << ": " << r->str() << " vs " << t.str();
  }
  // File order = the reference writer's layout: I64, then F32, I32, BF16, each by name.
  std::vector<std::string> order;
  for (const auto& [name, t] : out.tensors) order.push_back(name);
  EXPECT_EQ(order, (std::vector<std::string>{"i64", "empty", "f32", "scalar", "i32", "bf16", "odd_bf16"}));
  EXPECT_EQ(out.find("nope"), nullptr);
  EXPECT_INPUT_ERROR(out.at("nope"), path + ": tensor 'nope' is missing");
}

TEST(Safetensors, WrittenLayoutIsAligned) {
  const std::string path = temp_dir() + "/t.safetensors";
  write_safetensors(path, {{"b", testing::random_tensor({3}, 4).to_dtype(DType::kBF16)},
                           {"x", Tensor::from_vector<int64_t>({1}, {5})},
                           {"y", testing::random_tensor({1}, 5)}});
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8 + 4 + 6);
  // Header padding is spaces; no "__metadata__" when there is none.
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_NE(header.find("\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}"), std::string::npos) << header;
  EXPECT_NE(header.find("\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}"), std::string::npos)
      << header;
  EXPECT_NE(header.find("\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]}"), std::string::npos)
      << header;
}

TEST(Safetensors, WritesTheSameBytesAsPython) {
  const std::string path = temp_dir() + "/t.safetensors";
  write_safetensors(path, python_example_tensors(), {{"format", "pt"}});
  EXPECT_EQ(read_bytes(path), from_hex(kPythonTorchFile));
}

TEST(Safetensors, ReadsAFileWrittenByPython) {
  const std::string path = temp_dir() + "/py.safetensors";
  write_bytes(path, from_hex(kPythonTorchFile));
  SafetensorsData data = read_safetensors(path);
  EXPECT_EQ(data.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(data.tensors.size(), 5u);
  for (const auto& [name, t] : python_example_tensors()) EXPECT_TRUE(same_bytes(data.at(name), t)) << name;
}

TEST(Safetensors, ConvertsF16AndF64ToF32) {
  const std::string path = temp_dir() + "/py.safetensors";
  write_bytes(path, from_hex(kPythonNumpyF16F64File));
  SafetensorsData data = read_safetensors(path);
  const Tensor& half = data.at("half");
  EXPECT_EQ(half.dtype(), DType::kF32);
  EXPECT_EQ(half.shape(), (Shape{8}));
  std::vector<float> h = half.to_f32_vector();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -0.5f);
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));  // smallest subnormal half
  EXPECT_TRUE(std::isinf(h[4]) && h[4] > 0);
  EXPECT_TRUE(h[5] == 0.0f && std::signbit(h[5]));
  EXPECT_EQ(h[6], std::ldexp(1.0f, -14));  // smallest normal half
  EXPECT_EQ(h[7], 0.333251953125f);
  const Tensor& dbl = data.at("dbl");
  EXPECT_EQ(dbl.dtype(), DType::kF32);
  EXPECT_EQ(dbl.shape(), (Shape{2, 2}));
  std::vector<float> d = dbl.to_f32_vector();
  EXPECT_EQ(d[0], static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(d[1], -2.5e10f);
  EXPECT_EQ(d[2], 0.0f);  // 1e-300 underflows f32
  EXPECT_EQ(d[3], 7.0f);
}

TEST(Safetensors, EveryF16BitPatternConverts) {
  // All 65536 halves against the textbook formula: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals
  // 2^-14 * (m/1024), e = 31 infinities and NaNs.
  std::string data(2 * 65536, '\0');
  for (uint32_t b = 0; b < 65536; ++b) {
    data[2 * b] = static_cast<char>(b & 0xff);
    data[2 * b + 1] = static_cast<char>(b >> 8);
  }
  const std::string path = temp_dir() + "/f16.safetensors";
  write_bytes(path, make_file(R"({"h":{"dtype":"F16","shape":[256,256],"data_offsets":[0,131072]}})", data));
  const std::vector<float> got = read_safetensors(path).at("h").to_f32_vector();
  ASSERT_EQ(got.size(), 65536u);
  for (uint32_t b = 0; b < 65536; ++b) {
    const double sign = (b & 0x8000) ? -1.0 : 1.0;
    const int e = (b >> 10) & 0x1f;
    const int m = b & 0x3ff;
    if (e == 31) {
      if (m == 0)
        EXPECT_EQ(got[b], static_cast<float>(sign * INFINITY)) << b;
      else
        EXPECT_TRUE(std::isnan(got[b])) << b;
      continue;
    }
    const double want = e == 0 ? sign * std::ldexp(m / 1024.0, -14) : sign * std::ldexp(1.0 + m / 1024.0, e - 15);
    ASSERT_EQ(got[b], static_cast<float>(want)) << "bits 0x" << std::hex << b;
    EXPECT_EQ(std::signbit(got[b]), sign < 0) << b;
  }
}

TEST(Safetensors, F16LargerThanOneConversionChunk) {
  // 2^20 + 5 halves: the conversion goes through a 2^20-element staging buffer twice.
  const size_t n = (size_t{1} << 20) + 5;
  std::string data(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(0x3c00 + i % 1024);  // 1 + (i % 1024) / 1024
    data[2 * i] = static_cast<char>(h & 0xff);
    data[2 * i + 1] = static_cast<char>(h >> 8);
  }
  const std::string path = temp_dir() + "/big.safetensors";
  write_bytes(path, make_file(fmt::format(R"({{"h":{{"dtype":"F16","shape":[{}],"data_offsets":[0,{}]}}}})", n, 2 * n),
                              data));
  const Tensor t = read_safetensors(path).at("h");
  const float* p = t.data<float>();
  for (size_t i : {size_t{0}, size_t{1023}, (size_t{1} << 20) - 1, size_t{1} << 20, n - 1})
    EXPECT_EQ(p[i], 1.0f + static_cast<float>(i % 1024) / 1024.0f) << i;
}

TEST(Safetensors, HandBuiltFileWithPaddingAndZeroSizedTensor) {
  const std::string path = temp_dir() + "/h.safetensors";
  // Entries in any order in the JSON; a zero-sized tensor shares an offset; header padded.
  std::string data(12, '\0');
  const float v[3] = {1.f, 2.f, -3.f};
  std::memcpy(data.data(), v, 12);
  write_bytes(path, make_file(R"({"b":{"dtype":"F32","shape":[0,2],"data_offsets":[12,12]},)"
                              R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}   )",
                              data));
  SafetensorsData d = read_safetensors(path);
  ASSERT_EQ(d.tensors.size(), 2u);
  EXPECT_EQ(d.tensors[0].first, "a");
  EXPECT_EQ(d.tensors[0].second.to_f32_vector(), (std::vector<float>{1.f, 2.f, -3.f}));
  EXPECT_EQ(d.tensors[1].second.shape(), (Shape{0, 2}));
  EXPECT_TRUE(d.metadata.empty());
}

// ---- corrupt files: every message starts with the path and names the problem ----

class CorruptSafetensors : public ::testing::Test {
 protected:
  std::string dir = temp_dir();
  std::string path = dir + "/bad.safetensors";
  // Writes the bytes and returns the InputError message of reading them.
  std::string error_for(const std::string& bytes) {
    write_bytes(path, bytes);
    std::string msg = testing::input_error_of([&] { read_safetensors(path); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the path: " << msg;
    return msg;
  }
  std::string error_for_header(const std::string& header, size_t data_bytes) {
    return error_for(make_file(header, std::string(data_bytes, '\0')));
  }
};

#define EXPECT_CONTAINS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << "message: " << (msg)

TEST_F(CorruptSafetensors, MissingFile) {
  EXPECT_INPUT_ERROR(read_safetensors(dir + "/none.safetensors"), dir + "/none.safetensors: no such file");
}

TEST_F(CorruptSafetensors, ShorterThanLengthField) {
  EXPECT_CONTAINS(error_for("abcde"), "5 bytes, shorter than the 8-byte header length");
  EXPECT_CONTAINS(error_for(""), "0 bytes");
}

TEST_F(CorruptSafetensors, HeaderLengthBeyondFile) {
  EXPECT_CONTAINS(error_for(make_file("{}").substr(0, 9)), "header length 2 goes beyond the end of the file (9 bytes)");
}

TEST_F(CorruptSafetensors, AbsurdHeaderLength) {
  std::string bytes = make_file("{}");
  bytes[5] = 1;  // length 2^40 + 2
  EXPECT_CONTAINS(error_for(bytes), "is absurdly large");
}

TEST_F(CorruptSafetensors, InvalidJson) {
  EXPECT_CONTAINS(error_for(make_file("{\"a\": ")), "header is not valid JSON");
  EXPECT_CONTAINS(error_for(make_file("")), "header is not valid JSON");
  EXPECT_CONTAINS(error_for(make_file("{\"\xff\": 1}")), "header is not valid JSON");  // not UTF-8
}

TEST_F(CorruptSafetensors, HeaderNotAnObject) {
  EXPECT_CONTAINS(error_for(make_file("[1, 2]")), "header must be a JSON object, got a list");
}

TEST_F(CorruptSafetensors, EntryNotAnObject) {
  EXPECT_CONTAINS(error_for(make_file(R"({"w": 5})")), "tensor 'w': entry must be an object");
}

TEST_F(CorruptSafetensors, MissingKeys) {
  EXPECT_CONTAINS(error_for(make_file(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "0000")),
                  "tensor 'w': 'dtype' is missing");
  EXPECT_CONTAINS(error_for(make_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "0000")),
                  "tensor 'w': 'shape' is missing");
  EXPECT_CONTAINS(error_for(make_file(R"({"w": {"dtype": "F32", "shape": [1]}})", "0000")),
                  "tensor 'w': 'data_offsets' is missing");
}

TEST_F(CorruptSafetensors, UnknownAndUnsupportedDtype) {
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4),
                  "tensor 'w': unknown dtype 'F33'");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}})", 4),
                  "tensor 'w': dtype must be a string, got an integer");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 4),
                  "tensor 'w': dtype U8 is not supported (supported: F32, BF16, I32, I64, F16, F64)");
}

TEST_F(CorruptSafetensors, BadShape) {
  for (const char* shape : {"3", "[-1]", "[2.5]", "[\"2\"]", "[[2]]", "null"})
    EXPECT_CONTAINS(
        error_for_header(fmt::format(R"({{"w": {{"dtype": "F32", "shape": {}, "data_offsets": [0, 4]}}}})", shape), 4),
        "tensor 'w': shape must be a list of non-negative integers");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], )"
                                   R"("data_offsets": [0, 4]}})",
                                   4),
                  "has too many elements");
  // Even when a zero dim makes the tensor empty (element counts are int64 products elsewhere).
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F32", "shape": [0, 4294967296, 4294967296], )"
                                   R"("data_offsets": [0, 0]}})",
                                   0),
                  "shape [0,4294967296,4294967296] has too many elements");
}

TEST_F(CorruptSafetensors, BadOffsets) {
  for (const char* offsets : {"[0]", "[0, 4, 8]", "[-4, 0]", "[0, 4.0]", "\"0-4\""})
    EXPECT_CONTAINS(
        error_for_header(fmt::format(R"({{"w": {{"dtype": "F32", "shape": [1], "data_offsets": {}}}}})", offsets), 4),
        "tensor 'w': data_offsets must be [begin, end] with non-negative integers");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
                  "data_offsets [4, 0] end before they begin");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
                  "tensor 'w': data_offsets [0, 8] go beyond the data buffer (4 bytes)");
}

TEST_F(CorruptSafetensors, SizeMismatch) {
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
                  "tensor 'w': data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12 bytes");
  EXPECT_CONTAINS(error_for_header(R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}})", 16),
                  "shape [2,2] of BF16 needs 8 bytes");
}

TEST_F(CorruptSafetensors, OverlappingRanges) {
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                   R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                   12),
                  "tensors 'a' [0, 8) and 'b' [4, 12) overlap in the data buffer");
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                   R"( "b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
                                   4),
                  "overlap");
}

TEST_F(CorruptSafetensors, BytesNotCovered) {
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
                  "data buffer bytes [0, 4) belong to no tensor");
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                   R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                                   12),
                  "data buffer bytes [4, 8) belong to no tensor");
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 10),
                  "data buffer bytes [4, 10) at the end belong to no tensor");
  EXPECT_CONTAINS(error_for_header("{}", 3), "data buffer bytes [0, 3) at the end belong to no tensor");
}

TEST_F(CorruptSafetensors, BadMetadata) {
  EXPECT_CONTAINS(error_for(make_file(R"({"__metadata__": [1]})")), "'__metadata__' must be an object of strings");
  EXPECT_CONTAINS(error_for(make_file(R"({"__metadata__": {"step": 5}})")),
                  "__metadata__ value of 'step' must be a string, got an integer");
}

TEST_F(CorruptSafetensors, DuplicateNames) {
  EXPECT_CONTAINS(error_for_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                   R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                   8),
                  "header names 'a' twice");
}

// Every single-byte corruption of the length field and header of a valid file is either still a
// valid file or an InputError: never another exception, never a crash.
TEST_F(CorruptSafetensors, SingleByteMutationsNeverCrash) {
  const std::string good = from_hex(kPythonTorchFile);
  const size_t header_end = 8 + 312;
  write_bytes(path, good);
  // Patch one byte in place (truncating and rewriting a file is slow on some file systems).
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  auto put = [&](size_t pos, char value) {
    file.seekp(static_cast<std::streamoff>(pos));
    file.put(value);
    file.flush();
  };
  int refused = 0, accepted = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (char value : {'\0', '\xff', '9', '"', '}'}) {
      if (good[pos] == value) continue;
      put(pos, value);
      try {
        read_safetensors(path);
        ++accepted;
      } catch (const InputError& e) {
        ++refused;
        ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      } catch (const std::exception& e) {
        FAIL() << "byte " << pos << " = " << int(value) << ": not an InputError: " << e.what();
      }
      put(pos, good[pos]);
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(accepted, 0);  // e.g. a digit inside the metadata value "pt"
}

// ---- writing ----

TEST(SafetensorsWrite, RefusesBadInputAndKeepsThePreviousFile) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/m.safetensors";
  write_safetensors(path, {{"a", Tensor::from_vector<float>({1}, {1.f})}});
  const std::string before = read_bytes(path);
  auto t = Tensor::from_vector<float>({1}, {2.f});
  EXPECT_INPUT_ERROR(write_safetensors(path, {{"a", t}, {"a", t}}), "tensor name 'a' appears twice");
  EXPECT_INPUT_ERROR(write_safetensors(path, {{"__metadata__", t}}), "'__metadata__' cannot be a tensor name");
  EXPECT_INPUT_ERROR(write_safetensors(path, {{"u", Tensor()}}), "tensor 'u' is undefined");
  EXPECT_INPUT_ERROR(write_safetensors(path, {{"bad\xff", t}}), "not valid UTF-8");
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"m.safetensors"}));
}

TEST(SafetensorsWrite, ReplacesAtomicallyAndCleansUp) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/m.safetensors";
  write_safetensors(path, {{"a", Tensor::from_vector<float>({1}, {1.f})}});
  write_safetensors(path, {{"b", Tensor::from_vector<int32_t>({2}, {3, 4})}});
  SafetensorsData d = read_safetensors(path);
  ASSERT_EQ(d.tensors.size(), 1u);
  EXPECT_EQ(d.tensors[0].first, "b");
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"m.safetensors"}));

  // The rename fails (the target is a directory): the temporary file must not stay behind.
  const std::string blocked = dir + "/blocked";
  fs::create_directories(blocked + "/inside");
  EXPECT_INPUT_ERROR(write_safetensors(blocked, {{"a", Tensor::from_vector<float>({1}, {1.f})}}),
                     blocked + ": cannot rename");
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"blocked", "m.safetensors"}));
  EXPECT_INPUT_ERROR(write_safetensors(dir + "/no/such/dir/x.safetensors", {}), "cannot create temporary file");
}

TEST(SafetensorsWrite, WriteFileAtomic) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/config.json";
  write_file_atomic(path, "first");
  EXPECT_EQ(read_bytes(path), "first");
  write_file_atomic(path, std::string("second\0with nul", 15));
  EXPECT_EQ(read_bytes(path), std::string("second\0with nul", 15));
  write_file_atomic(path, "");
  EXPECT_EQ(read_bytes(path), "");
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"config.json"}));
  EXPECT_INPUT_ERROR(write_file_atomic(dir + "/missing/f", "x"), dir + "/missing/f: cannot create temporary file");
}

// ---- HF checkpoint directories ----

TEST(HfCheckpoint, SingleFile) {
  const std::string dir = temp_dir();
  write_safetensors(dir + "/model.safetensors", python_example_tensors(), {{"format", "pt"}});
  SafetensorsData d = read_hf_checkpoint(dir);
  EXPECT_EQ(d.tensors.size(), 5u);
  EXPECT_EQ(d.path, dir);
  EXPECT_EQ(d.metadata.at("format"), "pt");
  EXPECT_INPUT_ERROR(d.at("lm_head.weight"), dir + ": tensor 'lm_head.weight' is missing");
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    write_safetensors(dir + "/model-00001-of-00002.safetensors",
                      {{"embed", testing::random_tensor({4, 2}, 7)}, {"norm", testing::random_tensor({2}, 8)}},
                      {{"format", "pt"}});
    write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"head", testing::random_tensor({4, 2}, 9)}});
  }
  void write_index(const std::string& weight_map) {
    write_bytes(dir + "/model.safetensors.index.json",
                R"({"metadata": {"total_size": 72}, "weight_map": )" + weight_map + "}");
  }
  std::string dir = temp_dir();
};

TEST_F(ShardedCheckpoint, ReadsEveryShard) {
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors",)"
              R"( "norm": "model-00001-of-00002.safetensors"})");
  SafetensorsData d = read_hf_checkpoint(dir);
  ASSERT_EQ(d.tensors.size(), 3u);
  EXPECT_TRUE(same_bytes(d.at("embed"), testing::random_tensor({4, 2}, 7)));
  EXPECT_TRUE(same_bytes(d.at("norm"), testing::random_tensor({2}, 8)));
  EXPECT_TRUE(same_bytes(d.at("head"), testing::random_tensor({4, 2}, 9)));
  EXPECT_EQ(d.metadata.at("format"), "pt");
}

TEST_F(ShardedCheckpoint, IndexAndShardsMustAgree) {
  const std::string index = dir + "/model.safetensors.index.json";
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors",)"
              R"( "norm": "model-00001-of-00002.safetensors", "extra": "model-00002-of-00002.safetensors"})");
  EXPECT_INPUT_ERROR(
      read_hf_checkpoint(dir),
      index + ": lists tensor 'extra' in model-00002-of-00002.safetensors, but that shard does not hold it");
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors"})");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir),
                     "model-00001-of-00002.safetensors: holds tensor 'norm', which " + index + " does not list");
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00001-of-00002.safetensors",)"
              R"( "norm": "model-00001-of-00002.safetensors"})");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir),
                     "lists tensor 'head' in model-00001-of-00002.safetensors, but that shard");
  write_index(R"({"embed": "model-00003-of-00002.safetensors"})");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), dir + "/model-00003-of-00002.safetensors: no such file");
  write_index(R"({"embed": "../model.safetensors"})");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), "must be a file name inside the checkpoint directory");
  write_index(R"({"embed": 3})");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), "weight_map['embed'] must be a file name, got an integer");
  write_index("{}");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), "weight_map lists no tensors");
  write_index("[]");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), "'weight_map' must be an object");
  write_bytes(index, "{\"weight_map\": ");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), index + ": not valid JSON");
  write_bytes(index, "{}");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), index + ": 'weight_map' is missing");
}

TEST(HfCheckpoint, NotACheckpoint) {
  const std::string dir = temp_dir();
  EXPECT_INPUT_ERROR(
      read_hf_checkpoint(dir),
      dir + ": no model.safetensors and no model.safetensors.index.json: not an HF safetensors checkpoint");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir + "/absent"), dir + "/absent: not a directory");
  write_bytes(dir + "/model.safetensors", "short");
  EXPECT_INPUT_ERROR(read_hf_checkpoint(dir), dir + "/model.safetensors: not a safetensors file: 5 bytes");
}

}  // namespace
}  // namespace seqpar
