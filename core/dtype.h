#pragma once
#include <cstddef>
#include <cstdint>

namespace shamn {

// f64 exists for gradient checks (central differences in double); models train in f32.
enum class DType : uint8_t { f32, f64, i32, i8, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i8:
      return 1;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
  }
  return "?";
}

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <class T>
constexpr DType dtype_of = DTypeOf<T>::value;

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

}  // namespace shamn
