// safetensors: read (validated) and write (atomic). Format: u64 little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data buffer; offsets are relative to the buffer.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace seqpar {

struct SafetensorsData {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;

  // nullptr when absent
  const Tensor* find(const std::string& name) const;
  // Throws InputError "<file>: tensor '<name>' is missing" when absent.
  const Tensor& at(const std::string& name) const;
  std::string path;
};

// Reads a whole file into host tensors (F32, BF16, I32, I64; F16/F64 are converted to F32).
// Any inconsistency is an InputError naming the file and the problem: short file, header length
// beyond the file, invalid JSON, unknown dtype, shape/offset mismatch, offsets outside the
// buffer or overlapping.
SafetensorsData read_safetensors(const std::string& path);

// Writes host tensors (any device is copied to host) to `path` atomically: a temporary file in
// the same directory, fsync, rename. A crash mid-write leaves any previous file intact.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// An HF checkpoint directory: model.safetensors, or the shards listed by
// model.safetensors.index.json. Returns every tensor by name.
SafetensorsData read_hf_checkpoint(const std::string& model_dir);

// What a header says of one tensor: enough to check a checkpoint against a config before any
// tensor is read or any model allocated.
struct TensorInfo {
  std::string name;
  Shape shape;
  DType dtype;       // as read (F16/F64 become F32)
  std::string file;  // the file that holds it
};

// The tensors of one file / of an HF checkpoint directory, from the headers alone: every rule of
// read_safetensors / read_hf_checkpoint is checked (the same messages), no tensor data is read.
std::vector<TensorInfo> read_safetensors_header(const std::string& path);
std::vector<TensorInfo> read_hf_checkpoint_headers(const std::string& model_dir);

// Writes a string to a file atomically (temporary name, fsync, rename).
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace seqpar
