// Element types of tensors and the scalar conversions every backend shares.
#ifndef MLASERVE_KERNELS_DTYPE_H_
#define MLASERVE_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace mlaserve {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kI32,
  kF8E4M3,  // OCP float8 e4m3fn (no infinities; 0x7f/0xff are NaN)
};

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kI32:
      return "int32";
    case DType::kF8E4M3:
      return "float8_e4m3fn";
  }
  return "?";
}

// The activation dtype a command line names (--dtype): "float32" or "bfloat16"; nullopt for any
// other name.
constexpr std::optional<DType> ActivationDTypeFromName(std::string_view name) {
  if (name == DTypeName(DType::kF32)) return DType::kF32;
  if (name == DTypeName(DType::kBF16)) return DType::kBF16;
  return std::nullopt;
}

// The latent KV cache dtype a command line names (--kv_cache_dtype): "float32", "bfloat16", or
// "auto" (the activations' dtype, as vLLM's "auto" keeps the model's); nullopt for any other.
constexpr std::optional<DType> KvCacheDTypeFromName(std::string_view name, DType activation) {
  return name == "auto" ? std::optional<DType>(activation) : ActivationDTypeFromName(name);
}

// bf16 <-> f32. Rounding is round-to-nearest-even, NaN stays NaN (as torch does).
inline float Bf16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// x rounded to the nearest bf16 value (ties to even), as an f32.
inline float RoundToBf16(float x) { return Bf16ToF32(F32ToBf16(x)); }

// Whether a GEMM input that meets weights of dtype `weights` is rounded to bf16 on a backend
// whose activation dtype is `activation` (Backend::activation_dtype): the one rule every
// backend applies.
inline bool RoundsGemmInput(DType activation, DType weights) {
  return activation == DType::kBF16 && weights == DType::kBF16;
}

// IEEE binary16 -> f32 (exact).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float8 e4m3fn -> f32 (exact): bias 7, subnormals, S.1111.111 is NaN.
inline float F8E4M3ToF32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  uint32_t u;
  if (exp == 0xf && mant == 0x7) {
    u = 0x7fc00000u | sign;
  } else if (exp != 0) {
    u = sign | ((exp + 120) << 23) | (mant << 20);
  } else if (mant == 0) {
    u = sign;
  } else {
    float f = static_cast<float>(mant) * (1.0f / 512.0f);  // mant * 2^-9
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_DTYPE_H_
