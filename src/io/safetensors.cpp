// safetensors read (validated) and write (atomic).
//
// Format (https://github.com/huggingface/safetensors, "Format" section):
//   [8 bytes]  N, unsigned little-endian 64-bit: the header size
//   [N bytes]  JSON object {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//              ..., "__metadata__": {"key": "string value"}}, possibly padded with trailing spaces
//   [rest]     the data buffer; offsets are relative to its start, little-endian, row-major.
// The buffer must be covered exactly: sorted by offset, each tensor starts where the previous one
// ends and the last one ends at the end of the file (the reference implementation's rule).
//
// Reading: the header is parsed and every rule checked before any tensor is allocated; then each
// tensor is read from its offset straight into its own host storage (no whole-file buffer, so a
// checkpoint needs its own size in memory, not twice that). F32, BF16, I32 and I64 are kept as
// they are. F16 and F64 are converted to F32 on read (seqpar has no f16/f64 tensors): F16 -> F32
// is exact, F64 -> F32 rounds to nearest. Every other safetensors dtype (BOOL, U8, I8, I16, U16,
// U32, U64, F8_*) is refused with an InputError naming the tensor.
//
// Writing follows the reference writer (the Rust crate behind Python's `safetensors`), so for the
// same tensors and metadata the bytes are identical: tensors are laid out by dtype in the order
// I64, F32, I32, BF16 (the reference sorts by its Dtype enum, descending; for seqpar's dtypes
// that is also non-increasing element size, so every offset is a multiple of its element size),
// then by name; the header is "__metadata__" first, then the tensors in offset order, compact
// JSON, padded with spaces to a multiple of 8 bytes, so the buffer starts 8-byte aligned.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json_describe.h"

namespace seqpar {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
// would otherwise ask for an absurd allocation).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Element types a file may hold, and what each becomes in memory.
struct FileDType {
  std::string_view name;
  size_t size;
  bool supported;
  DType target;  // valid when supported
};

constexpr FileDType kFileDTypes[] = {
    {"F32", 4, true, DType::kF32},   {"BF16", 2, true, DType::kBF16},    {"I32", 4, true, DType::kI32},
    {"I64", 8, true, DType::kI64},   {"F16", 2, true, DType::kF32},      {"F64", 8, true, DType::kF32},
    {"BOOL", 1, false, DType::kF32}, {"U8", 1, false, DType::kF32},      {"I8", 1, false, DType::kF32},
    {"I16", 2, false, DType::kF32},  {"U16", 2, false, DType::kF32},     {"U32", 4, false, DType::kF32},
    {"U64", 8, false, DType::kF32},  {"F8_E5M2", 1, false, DType::kF32}, {"F8_E4M3", 1, false, DType::kF32},
    {"F8_E8M0", 1, false, DType::kF32}, {"F4", 1, false, DType::kF32}, {"F6_E2M3", 1, false, DType::kF32},
    {"F6_E3M2", 1, false, DType::kF32}, {"C64", 8, false, DType::kF32},
};

const FileDType* find_file_dtype(std::string_view name) {
  for (const auto& d : kFileDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

// Exact IEEE half -> float (normals, subnormals, zeros, infinities, NaN).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: value = mant * 2^-24. Normalise it.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string json_type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a float";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported JSON value";
  }
}

// A JSON value as a non-negative integer, or nullopt.
std::optional<uint64_t> as_uint(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

// One tensor entry of a header, validated.
struct Entry {
  std::string name;
  const FileDType* dtype;
  Shape shape;
  uint64_t numel;
  uint64_t begin, end;  // relative to the data buffer
};

struct Header {
  std::vector<Entry> entries;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start;  // 8 + N
};

// Parses and checks the header of a file of `file_size` bytes whose first bytes are in `in`.
Header read_header(std::ifstream& in, const std::string& path, uint64_t file_size) {
  SEQPAR_INPUT_CHECK(file_size >= 8,
                     "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length field", path,
                     file_size);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  SEQPAR_INPUT_CHECK(in.good(), "{}: cannot read the header length (read error)", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  SEQPAR_INPUT_CHECK(n <= kMaxHeaderBytes, "{}: header length {} is absurdly large (limit {} bytes): corrupt file?",
                     path, n, kMaxHeaderBytes);
  SEQPAR_INPUT_CHECK(n <= file_size - 8, "{}: header length {} goes beyond the end of the file ({} bytes)", path, n,
                     file_size);

  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  SEQPAR_INPUT_CHECK(in.good(), "{}: cannot read the {}-byte header (read error)", path, n);

  // Parse, refusing duplicate names at the top level (a later entry would silently hide an
  // earlier one).
  std::set<std::string> top_keys;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  check_json_depth(text, path);
  json header;
  try {
    header = json::parse(text, on_event);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: header is not valid JSON: {}", path, e.what()));
  }
  SEQPAR_INPUT_CHECK(header.is_object(), "{}: header must be a JSON object, got {}", path, json_type_name(header));
  SEQPAR_INPUT_CHECK(duplicate.empty(), "{}: header names '{}' twice", path, duplicate);

  const uint64_t buffer_size = file_size - 8 - n;
  Header out;
  out.data_start = 8 + n;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      SEQPAR_INPUT_CHECK(value.is_object(), "{}: '__metadata__' must be an object of strings, got {}", path,
                         json_type_name(value));
      for (const auto& [key, v] : value.items()) {
        SEQPAR_INPUT_CHECK(v.is_string(), "{}: __metadata__ value of '{}' must be a string, got {}", path, key,
                           json_type_name(v));
        out.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = fmt::format("{}: tensor '{}'", path, name);
    SEQPAR_INPUT_CHECK(value.is_object(), "{}: entry must be an object with dtype, shape, data_offsets; got {}", where,
                       json_type_name(value));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      SEQPAR_INPUT_CHECK(value.contains(key), "{}: '{}' is missing", where, key);

    Entry e;
    e.name = name;
    const json& dt = value["dtype"];
    SEQPAR_INPUT_CHECK(dt.is_string(), "{}: dtype must be a string, got {}", where, json_type_name(dt));
    e.dtype = find_file_dtype(dt.get<std::string>());
    SEQPAR_INPUT_CHECK(e.dtype != nullptr, "{}: unknown dtype '{}'", where, dt.get<std::string>());
    SEQPAR_INPUT_CHECK(e.dtype->supported, "{}: dtype {} is not supported (supported: F32, BF16, I32, I64, F16, F64)",
                       where, e.dtype->name);

    const json& shape = value["shape"];
    SEQPAR_INPUT_CHECK(shape.is_array(), "{}: shape must be a list of non-negative integers, got {}", where,
                       json_type_name(shape));
    // The product of the non-zero dims must fit (with room for the element size) even when a
    // zero dim makes the tensor empty: Shape arithmetic elsewhere multiplies in int64.
    uint64_t nonzero_product = 1;
    bool has_zero_dim = false;
    for (const json& d : shape) {
      std::optional<uint64_t> dim = as_uint(d);
      SEQPAR_INPUT_CHECK(dim.has_value() && *dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                         "{}: shape must be a list of non-negative integers, got {}", where, short_json(shape));
      e.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim == 0) {
        has_zero_dim = true;
        continue;
      }
      SEQPAR_INPUT_CHECK(nonzero_product <= std::numeric_limits<uint64_t>::max() / 16 / *dim,
                         "{}: shape {} has too many elements", where, short_json(shape));
      nonzero_product *= *dim;
    }
    e.numel = has_zero_dim ? 0 : nonzero_product;

    const json& offsets = value["data_offsets"];
    SEQPAR_INPUT_CHECK(offsets.is_array() && offsets.size() == 2 && as_uint(offsets[0]) && as_uint(offsets[1]),
                       "{}: data_offsets must be [begin, end] with non-negative integers, got {}", where,
                       short_json(offsets));
    e.begin = *as_uint(offsets[0]);
    e.end = *as_uint(offsets[1]);
    SEQPAR_INPUT_CHECK(e.begin <= e.end, "{}: data_offsets [{}, {}] end before they begin", where, e.begin, e.end);
    SEQPAR_INPUT_CHECK(e.end <= buffer_size, "{}: data_offsets [{}, {}] go beyond the data buffer ({} bytes)", where,
                       e.begin, e.end, buffer_size);
    const uint64_t expected = e.numel * e.dtype->size;
    SEQPAR_INPUT_CHECK(e.end - e.begin == expected,
                       "{}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {} bytes", where, e.begin,
                       e.end, e.end - e.begin, short_json(shape), e.dtype->name, expected);
    out.entries.push_back(std::move(e));
  }

  // The entries must tile the buffer: no overlap, no gap, nothing left over.
  std::sort(out.entries.begin(), out.entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : out.entries) {
    SEQPAR_INPUT_CHECK(e.begin >= covered, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data buffer",
                       path, prev ? prev->name : "", prev ? prev->begin : 0, covered, e.name, e.begin, e.end);
    SEQPAR_INPUT_CHECK(e.begin == covered, "{}: data buffer bytes [{}, {}) belong to no tensor", path, covered,
                       e.begin);
    covered = e.end;
    prev = &e;
  }
  SEQPAR_INPUT_CHECK(covered == buffer_size, "{}: data buffer bytes [{}, {}) at the end belong to no tensor", path,
                     covered, buffer_size);
  return out;
}

// Reads one validated entry into a host tensor, converting F16/F64 to F32.
Tensor read_entry(std::ifstream& in, const std::string& path, uint64_t data_start, const Entry& e) {
  Tensor t = Tensor::empty(e.shape, e.dtype->target);
  const uint64_t bytes = e.end - e.begin;
  if (bytes == 0) return t;
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  if (e.dtype->name == "F16" || e.dtype->name == "F64") {
    // Convert through a bounded staging buffer (1 Mi elements), not a whole second copy.
    const size_t esize = e.dtype->size;
    const uint64_t chunk = uint64_t{1} << 20;
    std::vector<char> raw(static_cast<size_t>(std::min(e.numel, chunk) * esize));
    float* out = t.data<float>();
    for (uint64_t first = 0; first < e.numel; first += chunk) {
      const uint64_t count = std::min(chunk, e.numel - first);
      in.read(raw.data(), static_cast<std::streamsize>(count * esize));
      SEQPAR_INPUT_CHECK(in.good(), "{}: cannot read tensor '{}' (read error, or the file changed while read)", path,
                         e.name);
      for (uint64_t i = 0; i < count; ++i) {
        if (esize == 2) {
          uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[first + i] = f16_to_f32(h);
        } else {
          double d;
          std::memcpy(&d, raw.data() + 8 * i, 8);
          out[first + i] = static_cast<float>(d);
        }
      }
    }
  } else {
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(bytes));
    SEQPAR_INPUT_CHECK(in.good(), "{}: cannot read tensor '{}' (read error, or the file changed while read)", path,
                       e.name);
  }
  return t;
}

// A file written under a temporary name in the target's directory and renamed over the target by
// commit(); destroyed uncommitted, it removes the temporary file and leaves the target untouched.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path) {
    static std::atomic<uint64_t> counter{0};
    tmp_ = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    SEQPAR_INPUT_CHECK(fd_ >= 0, "{}: cannot create temporary file {}: {}", path_, tmp_, std::strerror(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      SEQPAR_INPUT_CHECK(w > 0, "{}: write failed: {}", path_, std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  // fsync the data, rename over the target, fsync the directory so the rename itself is durable.
  void commit() {
    SEQPAR_INPUT_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", path_, std::strerror(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    SEQPAR_INPUT_CHECK(rc == 0, "{}: close failed: {}", path_, std::strerror(errno));
    SEQPAR_INPUT_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "{}: cannot rename {} over it: {}", path_, tmp_,
                       std::strerror(errno));
    committed_ = true;
    fs::path dir = fs::path(path_).parent_path();
    if (dir.empty()) dir = ".";
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // best effort: some file systems refuse fsync on a directory
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Position of a dtype in the reference writer's layout order (higher first).
int writer_rank(DType d) {
  switch (d) {
    case DType::kI64:
      return 3;
    case DType::kF32:
      return 2;
    case DType::kI32:
      return 1;
    case DType::kBF16:
    case DType::kF16:
      return 0;
  }
  return -1;
}

uint64_t file_size_of(const std::string& path) {
  std::error_code ec;
  SEQPAR_INPUT_CHECK(fs::exists(path, ec), "{}: no such file", path);
  SEQPAR_INPUT_CHECK(fs::is_regular_file(path, ec), "{}: not a regular file", path);
  uint64_t size = fs::file_size(path, ec);
  SEQPAR_INPUT_CHECK(!ec, "{}: cannot read its size: {}", path, ec.message());
  return size;
}

}  // namespace

const Tensor* SafetensorsData::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsData::at(const std::string& name) const {
  const Tensor* t = find(name);
  SEQPAR_INPUT_CHECK(t != nullptr, "{}: tensor '{}' is missing", path, name);
  return *t;
}

SafetensorsData read_safetensors(const std::string& path) {
  const uint64_t size = file_size_of(path);
  std::ifstream in(path, std::ios::binary);
  SEQPAR_INPUT_CHECK(in.is_open(), "{}: cannot open: {}", path, std::strerror(errno));
  Header header = read_header(in, path, size);
  SafetensorsData out;
  out.path = path;
  out.metadata = std::move(header.metadata);
  out.tensors.reserve(header.entries.size());
  for (const Entry& e : header.entries) out.tensors.emplace_back(e.name, read_entry(in, path, header.data_start, e));
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Layout order of the reference writer (see the header comment).
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string> names;
  for (const auto& item : tensors) {
    SEQPAR_INPUT_CHECK(item.first != "__metadata__", "{}: '__metadata__' cannot be a tensor name", path);
    SEQPAR_INPUT_CHECK(names.insert(item.first).second, "{}: tensor name '{}' appears twice", path, item.first);
    SEQPAR_INPUT_CHECK(item.second.defined(), "{}: tensor '{}' is undefined", path, item.first);
    order.push_back(&item);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    int ra = writer_rank(a->second.dtype()), rb = writer_rank(b->second.dtype());
    return ra != rb ? ra > rb : a->first < b->first;
  });

  // Header: "__metadata__" first, then the tensors in offset order. json::dump escapes names and
  // throws on strings that are not UTF-8 (the format requires UTF-8).
  auto quoted = [&](const std::string& s, const char* what) {
    try {
      return json(s).dump();
    } catch (const json::exception&) {
      throw InputError(fmt::format("{}: {} {} is not valid UTF-8", path, what,
                                   json(s).dump(-1, ' ', false, json::error_handler_t::replace)));
    }
  };
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (header.back() != '{') header += ",";
      header += quoted(key, "metadata key") + ":" + quoted(value, "metadata value");
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto* item : order) {
    const Tensor& t = item->second;
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}", first ? "" : ",",
                          quoted(item->first, "tensor name"), dtype_traits(t.dtype()).safetensors_name, shape.dump(),
                          offset, offset + t.nbytes());
    first = false;
    offset += t.nbytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicFile file(path);
  unsigned char len_bytes[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));
  file.write(len_bytes, 8);
  file.write(header.data(), header.size());
  for (const auto* item : order) {
    const Tensor& t = item->second;
    if (t.nbytes() == 0) continue;
    if (t.device().is_cpu()) {
      file.write(t.raw(), t.nbytes());
    } else {
      Tensor host = t.to(Device::cpu());
      file.write(host.raw(), host.nbytes());
    }
  }
  file.commit();
}

namespace {

// The files of an HF checkpoint directory: model.safetensors alone, or the shards its index lists
// (with the shard each tensor is listed in).
struct HfFiles {
  std::vector<std::string> shards;              // paths, in the order the index first names them
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name (index only)
  std::string index_name;                       // "" for a single file
};

HfFiles hf_checkpoint_files(const std::string& model_dir) {
  std::error_code ec;
  SEQPAR_INPUT_CHECK(fs::is_directory(model_dir, ec), "{}: not a directory (expected an HF checkpoint directory)",
                     model_dir);
  const fs::path dir(model_dir);
  const fs::path single = dir / "model.safetensors";
  const fs::path index_path = dir / "model.safetensors.index.json";
  HfFiles out;
  if (fs::exists(single, ec)) {
    out.shards.push_back(single.string());
    return out;
  }
  SEQPAR_INPUT_CHECK(fs::exists(index_path, ec),
                     "{}: no model.safetensors and no model.safetensors.index.json: not an HF safetensors checkpoint",
                     model_dir);

  out.index_name = index_path.string();
  const std::string& index_name = out.index_name;
  const json index = parse_json_input(read_input_file(index_name, kIndexInput), index_name);
  SEQPAR_INPUT_CHECK(index.is_object() && index.contains("weight_map"), "{}: 'weight_map' is missing", index_name);
  const json& weight_map = index["weight_map"];
  SEQPAR_INPUT_CHECK(weight_map.is_object(), "{}: 'weight_map' must be an object of tensor name -> shard file, got {}",
                     index_name, json_type_name(weight_map));

  // Shard files in the order they first appear; each must be a plain file name in this directory.
  std::vector<std::string> names;
  for (const auto& [name, file] : weight_map.items()) {
    SEQPAR_INPUT_CHECK(file.is_string(), "{}: weight_map['{}'] must be a file name, got {}", index_name, name,
                       json_type_name(file));
    const std::string f = file.get<std::string>();
    SEQPAR_INPUT_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                       "{}: weight_map['{}'] = '{}' must be a file name inside the checkpoint directory", index_name,
                       name, f);
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
    out.shard_of[name] = f;
  }
  SEQPAR_INPUT_CHECK(!names.empty(), "{}: weight_map lists no tensors", index_name);
  for (const std::string& n : names) out.shards.push_back((dir / n).string());
  return out;
}

// Checks that shard `shard_path` holding `names` agrees with the index (a no-op without one).
void check_shard_against_index(const HfFiles& files, const std::string& shard_path,
                               const std::vector<std::string>& names, std::map<std::string, std::string>& found_in) {
  if (files.index_name.empty()) return;
  const std::string shard = fs::path(shard_path).filename().string();
  for (const std::string& name : names) {
    auto listed = files.shard_of.find(name);
    SEQPAR_INPUT_CHECK(listed != files.shard_of.end(), "{}: holds tensor '{}', which {} does not list", shard_path,
                       name, files.index_name);
    SEQPAR_INPUT_CHECK(listed->second == shard, "{}: holds tensor '{}', which {} places in {}", shard_path, name,
                       files.index_name, listed->second);
    found_in[name] = shard;
  }
}

void check_index_complete(const HfFiles& files, const std::map<std::string, std::string>& found_in) {
  for (const auto& [name, shard] : files.shard_of)
    SEQPAR_INPUT_CHECK(found_in.count(name), "{}: lists tensor '{}' in {}, but that shard does not hold it",
                       files.index_name, name, shard);
}

}  // namespace

std::vector<TensorInfo> read_safetensors_header(const std::string& path) {
  const uint64_t size = file_size_of(path);
  std::ifstream in(path, std::ios::binary);
  SEQPAR_INPUT_CHECK(in.is_open(), "{}: cannot open: {}", path, std::strerror(errno));
  const Header header = read_header(in, path, size);
  std::vector<TensorInfo> out;
  out.reserve(header.entries.size());
  for (const Entry& e : header.entries) out.push_back({e.name, e.shape, e.dtype->target, path});
  return out;
}

std::vector<TensorInfo> read_hf_checkpoint_headers(const std::string& model_dir) {
  const HfFiles files = hf_checkpoint_files(model_dir);
  std::vector<TensorInfo> out;
  std::map<std::string, std::string> found_in;
  for (const std::string& shard : files.shards) {
    std::vector<TensorInfo> part = read_safetensors_header(shard);
    std::vector<std::string> names;
    for (const TensorInfo& t : part) names.push_back(t.name);
    check_shard_against_index(files, shard, names, found_in);
    for (TensorInfo& t : part) out.push_back(std::move(t));
  }
  check_index_complete(files, found_in);
  return out;
}

SafetensorsData read_hf_checkpoint(const std::string& model_dir) {
  const HfFiles files = hf_checkpoint_files(model_dir);
  SafetensorsData out;
  out.path = model_dir;
  std::map<std::string, std::string> found_in;
  for (const std::string& shard : files.shards) {
    SafetensorsData part = read_safetensors(shard);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : part.tensors) names.push_back(name);
    check_shard_against_index(files, shard, names, found_in);
    for (auto& [name, tensor] : part.tensors) out.tensors.emplace_back(name, std::move(tensor));
    for (auto& [key, value] : part.metadata) out.metadata.emplace(key, value);  // the first shard's value wins
  }
  check_index_complete(files, found_in);
  return out;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile file(path);
  file.write(contents.data(), contents.size());
  file.commit();
}

}  // namespace seqpar
