#pragma once
// Named tensors and root attributes in HDF5 files (C API), for checkpoints.
// Paths are HDF5 paths ("/model/embed/table"). Writes go through an AtomicFile, so
// a crash or an error never leaves a half-written file under the real name.
// Every dataset carries a CRC-32 of its values (attribute `crc32`), verified
// when it is read.
#include <cstdint>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/tensor.h"

namespace shamn {

// The layout version of shamn's checkpoints (SPEC section 4), in their root attribute
// `format_version`: written by train/model_checkpoint, checked by every reader.
inline constexpr int64_t kCheckpointFormatVersion = 1;

class Hdf5Writer {
 public:
  // `kind` names the fault-injection sites (core/fault.h), "<kind>.tensor" among them.
  Hdf5Writer(const std::string& path, const std::string& kind);
  ~Hdf5Writer();  // without commit(): removes the temporary file
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  void write_tensor(const std::string& dataset_path, const Tensor& tensor);
  void set_string_attribute(const std::string& name, const std::string& value);  // on "/"
  void set_int_attribute(const std::string& name, int64_t value);                // on "/"
  void set_float_attribute(const std::string& name, double value);               // on "/"
  void commit();

 private:
  // native_type: an hid_t (kept out of this header).
  void write_scalar_attribute(const std::string& name, int64_t native_type, const void* value);
  std::string path_;
  AtomicFile temp_;
  int64_t file_ = -1;
};

class Hdf5Reader {
 public:
  explicit Hdf5Reader(const std::string& path);  // throws InputError naming the file
  ~Hdf5Reader();
  Hdf5Reader(const Hdf5Reader&) = delete;
  Hdf5Reader& operator=(const Hdf5Reader&) = delete;

  const std::string& path() const { return path_; }
  bool has_dataset(const std::string& dataset_path) const;
  // Every dataset below `group` ("/model"), as full paths in name order.
  std::vector<std::string> datasets(const std::string& group) const;
  // Throws InputError when the shape's bytes could not fit in the file (checkpoints
  // are stored uncompressed), so a damaged header never turns into a huge allocation.
  Shape dataset_shape(const std::string& dataset_path) const;
  Tensor read_tensor(const std::string& dataset_path) const;  // f32, f64, i32, i8, u8
  bool has_attribute(const std::string& name) const;
  std::string string_attribute(const std::string& name) const;
  int64_t int_attribute(const std::string& name) const;
  double float_attribute(const std::string& name) const;

 private:
  // type_class: an H5T_class_t; native_type: an hid_t (kept out of this header).
  void read_scalar_attribute(const std::string& name, int type_class, int64_t native_type, const char* kind,
                             void* out) const;
  std::string path_;
  int64_t file_ = -1;
  int64_t file_bytes_ = 0;  // what any dataset or attribute read may at most hold
};

// "layers.3.mixer.conv" <-> "/model/layers/3/mixer/conv" (SPEC section 4).
std::string checkpoint_path(const std::string& group, const std::string& dotted_name);
std::string dotted_name(const std::string& group, const std::string& dataset_path);

}  // namespace shamn
