// Host conversions between f32 and the 16-bit dtypes (bf16, f16), round to nearest
// even, and stores/loads of one value of a float dtype: what device harnesses and
// tests use to fill and read device buffers.
#pragma once

#include <cstdint>
#include <cstring>

#include "cliffguard/op_key.h"

namespace cliffguard::detail {

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float Bf16ToFloat(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t FloatToF16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float F16ToFloat(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

// One value of a floating-point dtype (f32, f16, bf16) written to `p` as the dtype
// stores it (rounded to nearest even); returns the value as stored.
inline float StoreAs(DType d, float v, void* p) {
  if (d == DType::kF32) {
    std::memcpy(p, &v, 4);
    return v;
  }
  const uint16_t h = d == DType::kBF16 ? FloatToBf16(v) : FloatToF16(v);
  std::memcpy(p, &h, 2);
  return d == DType::kBF16 ? Bf16ToFloat(h) : F16ToFloat(h);
}
// The value at `p`, stored as dtype `d` (f32, f16, bf16).
inline float LoadAs(DType d, const void* p) {
  if (d == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::kBF16 ? Bf16ToFloat(h) : F16ToFloat(h);
}

}  // namespace cliffguard::detail
