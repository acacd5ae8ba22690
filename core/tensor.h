#pragma once
// Tensor: a shape, a dtype and a view into shared, 64-byte-aligned storage.
// Layout is always contiguous row-major. Views (reshape, leading-dim slices,
// select) share the storage and copy nothing; clone() copies.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "core/check.h"
#include "core/dtype.h"

namespace shamn {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Owns one aligned allocation. Tensors hold it through a shared_ptr.
class Storage {
 public:
  explicit Storage(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_;
  size_t nbytes_;
};

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using VectorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVectorMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  template <class T>
  static Tensor from_data(const Shape& shape, std::span<const T> values);
  template <class T>
  static Tensor from_data(const Shape& shape, std::initializer_list<T> values) {
    return from_data<T>(shape, std::span<const T>(values.begin(), values.size()));
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  std::string str() const;  // "f32[3, 4]"

  // Typed element pointer; throws if T does not match the dtype.
  template <class T>
  T* data() const {
    SHAMN_CHECK(dtype_ == dtype_of<T>, "tensor ", str(), " accessed as ", dtype_name(dtype_of<T>));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // Views (no copy).
  Tensor reshape(const Shape& shape) const;  // one dim may be -1
  Tensor flatten() const { return reshape({numel_}); }
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor select(int64_t index) const;              // row `index` of dim 0, one dim fewer
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // This handle is the only one on its storage and spans all of it: nothing
  // else can see a write through it, and handing it over moves the whole buffer.
  bool sole_owner() const;

  // Copies.
  Tensor clone() const;
  Tensor to(DType dtype) const;  // numeric conversion (always a copy)
  // Writers of the data (the handle itself is unchanged, hence const, as with
  // data<T>()): every view of the storage sees the change.
  void copy_from(const Tensor& src) const;  // same shape and dtype
  void fill(double value) const;
  void zero() const;

  // Element i of the flattened tensor, converted to double (tests, debugging).
  double item(int64_t i = 0) const;
  void set_item(int64_t i, double value) const;  // converted to the dtype
  template <class T>
  std::vector<T> to_vector() const;

  // Eigen views over the data: matrix() is [numel / last_dim, last_dim].
  template <class T>
  MatrixMap<T> matrix() const {
    const int64_t cols = dim() == 0 ? 1 : shape_.back();
    return MatrixMap<T>(data<T>(), cols == 0 ? 0 : numel_ / cols, cols);
  }
  template <class T>
  VectorMap<T> vector() const {
    return VectorMap<T>(data<T>(), numel_);
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

// A tensor with its dotted name (checkpoint entries, buffers, optimizer state).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// True when both tensors have the same shape and dtype and bitwise-equal data.
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace shamn
