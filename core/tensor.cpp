#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/aligned.h"
#include "core/ceil_div.h"
#include "core/parallel.h"

namespace shamn {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    SHAMN_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    SHAMN_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ", shape_str(shape),
                " has too many elements");
    n *= d;
  }
  return n;
}

Storage::Storage(size_t nbytes) : data_(aligned_alloc_bytes(nbytes)), nbytes_(nbytes) {}
Storage::~Storage() { aligned_free(data_, nbytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  // numel fits int64 but numel * element size may not fit size_t: wrapped, it
  // would allocate a small buffer for a huge tensor.
  SHAMN_CHECK(static_cast<size_t>(t.numel_) <= std::numeric_limits<size_t>::max() / dtype_size(dtype),
              "shape ", shape_str(shape), " ", dtype_name(dtype), " has too many bytes");
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel_) * dtype_size(dtype));
  return t;
}

bool Tensor::sole_owner() const {
  return storage_ != nullptr && storage_.use_count() == 1 && offset_bytes_ == 0 &&
         static_cast<size_t>(numel_) * dtype_size(dtype_) == storage_->nbytes();
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

template <class T>
Tensor Tensor::from_data(const Shape& shape, std::span<const T> values) {
  Tensor t = empty(shape, dtype_of<T>);
  SHAMN_CHECK(static_cast<int64_t>(values.size()) == t.numel_, "from_data: ", values.size(),
              " values for shape ", shape_str(shape));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size_bytes());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  if (d < 0) d += n;
  SHAMN_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for ", str());
  return shape_[static_cast<size_t>(d)];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_);
}

void* Tensor::raw_data() const {
  SHAMN_CHECK(defined(), "use of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  SHAMN_CHECK(defined(), "reshape of an undefined tensor");
  Shape resolved = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      SHAMN_CHECK(infer < 0, "reshape ", str(), " to ", shape_str(shape), ": more than one -1");
      infer = static_cast<int>(i);
    } else {
      SHAMN_CHECK(resolved[i] >= 0, "reshape to ", shape_str(shape), ": negative dimension");
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    SHAMN_CHECK(known > 0 && numel_ % known == 0, "cannot reshape ", str(), " to ", shape_str(shape));
    resolved[static_cast<size_t>(infer)] = numel_ / known;
  }
  SHAMN_CHECK(shape_numel(resolved) == numel_, "cannot reshape ", str(), " to ", shape_str(shape),
              ": element counts differ");
  Tensor t = *this;
  t.shape_ = std::move(resolved);
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  SHAMN_CHECK(dim() >= 1, "slice of a scalar tensor");
  const int64_t rows = shape_[0];
  SHAMN_CHECK(0 <= begin && begin <= end && end <= rows, "slice [", begin, ", ", end, ") out of range for ",
              str());
  const int64_t row_numel = rows == 0 ? 0 : numel_ / rows;
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row_numel;
  t.offset_bytes_ += static_cast<size_t>(begin * row_numel) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::select(int64_t index) const {
  Tensor t = slice(index, index + 1);
  t.shape_.erase(t.shape_.begin());
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  if (numel_ > 0) std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

namespace {
template <class To, class From>
void convert(To* dst, const From* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<To>(src[i]);
}

template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      break;
    case DType::f64:
      f(double{});
      break;
    case DType::i32:
      f(int32_t{});
      break;
    case DType::i8:
      f(int8_t{});
      break;
    case DType::u8:
      f(uint8_t{});
      break;
  }
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape_, dtype);
  dispatch(dtype_, [&](auto from) {
    using From = decltype(from);
    dispatch(dtype, [&](auto to) {
      using To = decltype(to);
      convert(t.data<To>(), data<From>(), numel_);
    });
  });
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  SHAMN_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_, "copy_from: ", src.str(), " into ", str());
  if (numel_ > 0) std::memmove(raw_data(), src.raw_data(), nbytes());
}

void Tensor::fill(double value) const {
  dispatch(dtype_, [&](auto zero) {
    using T = decltype(zero);
    T* p = data<T>();
    const T v = static_cast<T>(value);
    for (int64_t i = 0; i < numel_; ++i) p[i] = v;
  });
}

void Tensor::zero() const {
  if (numel_ == 0) return;
  // Gradient buffers of activations are zeroed on every step: split the big ones.
  constexpr int64_t kChunk = int64_t{256} << 10;
  char* p = static_cast<char*>(raw_data());
  const int64_t bytes = static_cast<int64_t>(nbytes());
  parallel_for(0, ceil_div(bytes, kChunk), 1, [&](int64_t lo, int64_t hi) {
    const int64_t end = std::min(bytes, hi * kChunk);
    std::memset(p + lo * kChunk, 0, static_cast<size_t>(end - lo * kChunk));
  });
}

double Tensor::item(int64_t i) const {
  SHAMN_CHECK(0 <= i && i < numel_, "item(", i, ") out of range for ", str());
  double out = 0;
  dispatch(dtype_, [&](auto zero) {
    using T = decltype(zero);
    out = static_cast<double>(data<T>()[i]);
  });
  return out;
}

void Tensor::set_item(int64_t i, double value) const {
  SHAMN_CHECK(0 <= i && i < numel_, "set_item(", i, ") out of range for ", str());
  dispatch(dtype_, [&](auto zero) {
    using T = decltype(zero);
    data<T>()[i] = static_cast<T>(value);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const T* p = data<T>();
  return std::vector<T>(p, p + numel_);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return a.numel() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

#define SHAMN_INSTANTIATE(T)                                              \
  template Tensor Tensor::from_data<T>(const Shape&, std::span<const T>); \
  template std::vector<T> Tensor::to_vector<T>() const;
SHAMN_INSTANTIATE(float)
SHAMN_INSTANTIATE(double)
SHAMN_INSTANTIATE(int32_t)
SHAMN_INSTANTIATE(int8_t)
SHAMN_INSTANTIATE(uint8_t)
#undef SHAMN_INSTANTIATE

}  // namespace shamn
