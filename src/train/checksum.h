// Checksums of checkpoint files (docs/RELIABILITY.md): XXH64 (seed 0), written here from the
// algorithm's public description, over a file's bytes read in 1 MiB chunks (several GB/s: cheap
// next to writing or reading the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace seqpar {

// XXH64 of a buffer.
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
// XXH64 of a file's bytes; InputError naming the file when it cannot be read.
uint64_t file_xxh64(const std::string& path);
// "xxh64:<16 hex digits>", as checkpoints record it.
std::string checksum_text(uint64_t h);

}  // namespace seqpar
