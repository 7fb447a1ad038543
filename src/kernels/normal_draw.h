// The counter-based normal draw behind normal_fill (ops.h), one definition for the CPU and the CUDA
// kernels: element pair (2j, 2j+1) of a tensor drawn with key k is one Box-Muller draw from the
// two SplitMix64-mixed counters k + 2j and k + 2j + 1 (53-bit uniforms in (0, 1], double math). Both
// backends compute the same double expression; their libm's log / cos / sin may differ in the last
// bit of a double, which the rounding to f32 almost never shows.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace seqpar {

// SplitMix64's finaliser: a 64-bit mix with full avalanche.
SEQPAR_HOST_DEVICE inline uint64_t normal_mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pair j of key `key`, times `std`.
SEQPAR_HOST_DEVICE inline void normal_pair(uint64_t key, int64_t j, float std, float& first, float& second) {
  const uint64_t c = key + 2 * static_cast<uint64_t>(j);
  const double u1 = (static_cast<double>(normal_mix64(c) >> 11) + 1.0) * 0x1.0p-53;  // never 0: log takes it
  const double u2 = (static_cast<double>(normal_mix64(c + 1) >> 11) + 1.0) * 0x1.0p-53;
  const double r = sqrt(-2.0 * log(u1));
  const double a = 6.283185307179586 * u2;
  first = static_cast<float>(std * r * cos(a));
  second = static_cast<float>(std * r * sin(a));
}

}  // namespace seqpar
