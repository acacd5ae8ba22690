#include "core/hdf5_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <hdf5.h>

#include "core/check.h"
#include "core/checksum.h"
#include "core/fault.h"

namespace shamn {
namespace {

// HDF5 prints its own error stack to stderr by default; we report errors ourselves.
void silence_hdf5() {
  static const bool done = [] {
    // No library shutdown at exit: after a failed write (a full disk) the file's
    // close fails too and its handle stays open, and HDF5 1.10's exit-time
    // cleanup then crashed closing it. Every file is closed explicitly anyway.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// What a failed write most likely means: I/O errors are the user's to fix
// (InputError), not a bug.
constexpr const char* kFullDisk = " (is the disk full, or the file over the size limit?)";

// Closes an HDF5 handle at scope exit.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

hid_t native_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return H5T_NATIVE_FLOAT;
    case DType::f64:
      return H5T_NATIVE_DOUBLE;
    case DType::i32:
      return H5T_NATIVE_INT32;
    case DType::i8:
      return H5T_NATIVE_INT8;
    case DType::u8:
      return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_FLOAT;
}

// The attribute every dataset carries: CRC-32 (zlib's, the one gzip and PNG use)
// of the values' bytes as stored in memory on a little-endian machine.
constexpr const char* kChecksumAttribute = "crc32";

uint32_t checksum(const Tensor& t) { return crc32_bytes(t.raw_data(), t.nbytes()); }

}  // namespace

std::string checkpoint_path(const std::string& group, const std::string& dotted) {
  std::string out = group + "/" + dotted;
  for (size_t i = group.size() + 1; i < out.size(); ++i)
    if (out[i] == '.') out[i] = '/';
  return out;
}

std::string dotted_name(const std::string& group, const std::string& dataset_path) {
  std::string out = dataset_path.substr(group.size() + 1);
  for (char& c : out)
    if (c == '/') c = '.';
  return out;
}

Hdf5Writer::Hdf5Writer(const std::string& path, const std::string& kind) : path_(path), temp_(path, kind) {
  silence_hdf5();
  file_ = H5Fcreate(temp_.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  SHAMN_INPUT_CHECK(file_ >= 0, "cannot create '", temp_.temp_path(), "' to write '", path,
                    "' (does the directory exist and is it writable?)");
}

Hdf5Writer::~Hdf5Writer() {
  if (file_ >= 0) H5Fclose(file_);  // temp_ then removes the unfinished file
}

void Hdf5Writer::write_tensor(const std::string& dataset_path, const Tensor& tensor) {
  std::vector<hsize_t> dims(tensor.shape().begin(), tensor.shape().end());
  Handle space{dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose};
  Handle link_props{H5Pcreate(H5P_LINK_CREATE), H5Pclose};
  H5Pset_create_intermediate_group(link_props.id, 1);
  Handle dataset{H5Dcreate2(file_, dataset_path.c_str(), native_type(tensor.dtype()), space.id, link_props.id,
                            H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose};
  SHAMN_INPUT_CHECK(dataset.id >= 0, "cannot create dataset '", dataset_path, "' in '", path_, "'",
                    kFullDisk);
  if (tensor.numel() > 0)
    SHAMN_INPUT_CHECK(H5Dwrite(dataset.id, native_type(tensor.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                               tensor.raw_data()) >= 0,
                      "writing dataset '", dataset_path, "' to '", path_, "' failed", kFullDisk);
  const int err = fault::pass(temp_.kind() + ".tensor");
  SHAMN_INPUT_CHECK(err == 0, "writing dataset '", dataset_path, "' to '", path_,
                    "' failed: ", std::strerror(err), " (disk full?)");
  const uint32_t crc = checksum(tensor);
  Handle attr_space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle attr{
      H5Acreate2(dataset.id, kChecksumAttribute, H5T_NATIVE_UINT32, attr_space.id, H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose};
  SHAMN_INPUT_CHECK(attr.id >= 0 && H5Awrite(attr.id, H5T_NATIVE_UINT32, &crc) >= 0,
                    "writing the checksum of '", dataset_path, "' to '", path_, "' failed", kFullDisk);
}

void Hdf5Writer::set_string_attribute(const std::string& name, const std::string& value) {
  Handle type{H5Tcopy(H5T_C_S1), H5Tclose};
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle attr{H5Acreate2(file_, name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  const char* data = value.c_str();
  SHAMN_INPUT_CHECK(attr.id >= 0 && H5Awrite(attr.id, type.id, &data) >= 0, "writing attribute '", name,
                    "' to '", path_, "' failed", kFullDisk);
}

void Hdf5Writer::set_int_attribute(const std::string& name, int64_t value) {
  write_scalar_attribute(name, H5T_NATIVE_INT64, &value);
}

void Hdf5Writer::set_float_attribute(const std::string& name, double value) {
  write_scalar_attribute(name, H5T_NATIVE_DOUBLE, &value);
}

void Hdf5Writer::write_scalar_attribute(const std::string& name, int64_t native_type, const void* value) {
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  Handle attr{H5Acreate2(file_, name.c_str(), native_type, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  SHAMN_INPUT_CHECK(attr.id >= 0 && H5Awrite(attr.id, native_type, value) >= 0, "writing attribute '", name,
                    "' to '", path_, "' failed", kFullDisk);
}

void Hdf5Writer::commit() {
  SHAMN_CHECK(file_ >= 0, "Hdf5Writer::commit called twice for '", path_, "'");
  SHAMN_INPUT_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL) >= 0, "writing '", path_, "' failed (flushing '",
                    temp_.temp_path(), "')", kFullDisk);
  const herr_t closed = H5Fclose(file_);
  file_ = -1;
  SHAMN_INPUT_CHECK(closed >= 0, "writing '", path_, "' failed (closing '", temp_.temp_path(), "')",
                    kFullDisk);
  temp_.commit();
}

Hdf5Reader::Hdf5Reader(const std::string& path) : path_(path) {
  silence_hdf5();
  SHAMN_INPUT_CHECK(std::filesystem::exists(path), "checkpoint '", path, "' does not exist");
  std::error_code error;
  file_bytes_ = static_cast<int64_t>(std::filesystem::file_size(path, error));
  SHAMN_INPUT_CHECK(!error, "cannot read the size of checkpoint '", path, "': ", error.message());
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  SHAMN_INPUT_CHECK(file_ >= 0, "'", path, "' is not a readable HDF5 file (truncated or not a checkpoint?)");
}

Hdf5Reader::~Hdf5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool Hdf5Reader::has_dataset(const std::string& dataset_path) const {
  // Walk the path so a missing intermediate group is "absent", not an error.
  size_t pos = 0;
  while ((pos = dataset_path.find('/', pos + 1)) != std::string::npos)
    if (H5Lexists(file_, dataset_path.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  if (H5Lexists(file_, dataset_path.c_str(), H5P_DEFAULT) <= 0) return false;
  Handle obj{H5Oopen(file_, dataset_path.c_str(), H5P_DEFAULT), H5Oclose};
  return obj.id >= 0 && H5Iget_type(obj.id) == H5I_DATASET;
}

std::vector<std::string> Hdf5Reader::datasets(const std::string& group) const {
  std::vector<std::string> out;
  if (H5Lexists(file_, group.c_str(), H5P_DEFAULT) <= 0) return out;
  Handle g{H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose};
  SHAMN_INPUT_CHECK(g.id >= 0, "'", path_, "': '", group, "' is not a group");
  struct Ctx {
    std::vector<std::string>* out;
    std::string group;
  } ctx{&out, group};
  H5Lvisit(
      g.id, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t gid, const char* name, const H5L_info_t*, void* data) -> herr_t {
        auto* c = static_cast<Ctx*>(data);
        const hid_t obj = H5Oopen(gid, name, H5P_DEFAULT);
        if (obj >= 0) {
          if (H5Iget_type(obj) == H5I_DATASET) c->out->push_back(c->group + "/" + name);
          H5Oclose(obj);
        }
        return 0;
      },
      &ctx);
  return out;
}

Shape Hdf5Reader::dataset_shape(const std::string& dataset_path) const {
  Handle dataset{H5Dopen2(file_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose};
  SHAMN_INPUT_CHECK(dataset.id >= 0, "'", path_, "' has no dataset '", dataset_path, "'");
  Handle space{H5Dget_space(dataset.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(space.id);
  SHAMN_INPUT_CHECK(rank >= 0, "'", path_, "': cannot read the shape of '", dataset_path, "'");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  SHAMN_INPUT_CHECK(H5Sget_simple_extent_dims(space.id, dims.data(), nullptr) == rank, "'", path_,
                    "': cannot read the shape of '", dataset_path, "'");
  // The element count, zeros skipped so that e.g. [0, 2^40] is refused too; at
  // least one byte per element even for an empty tensor's other dims.
  uint64_t elements = 1;
  for (const hsize_t d : dims) {
    SHAMN_INPUT_CHECK(d == 0 || (elements <= static_cast<uint64_t>(file_bytes_) / d &&
                                 elements * d <= static_cast<uint64_t>(file_bytes_)),
                      "'", path_, "': dataset '", dataset_path, "' has a dimension of ", d,
                      " that makes it larger than the whole file (", file_bytes_,
                      " bytes): the file is corrupt");
    if (d > 0) elements *= d;
  }
  return Shape(dims.begin(), dims.end());
}

Tensor Hdf5Reader::read_tensor(const std::string& dataset_path) const {
  Handle dataset{H5Dopen2(file_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose};
  SHAMN_INPUT_CHECK(dataset.id >= 0, "'", path_, "' has no dataset '", dataset_path, "'");
  Handle type{H5Dget_type(dataset.id), H5Tclose};
  const H5T_class_t cls = H5Tget_class(type.id);
  const size_t size = H5Tget_size(type.id);
  DType dt;
  if (cls == H5T_FLOAT && size == 4)
    dt = DType::f32;
  else if (cls == H5T_FLOAT && size == 8)
    dt = DType::f64;
  else if (cls == H5T_INTEGER && size == 4 && H5Tget_sign(type.id) == H5T_SGN_2)
    dt = DType::i32;
  else if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(type.id) == H5T_SGN_2)
    dt = DType::i8;
  else if (cls == H5T_INTEGER && size == 1)
    dt = DType::u8;
  else
    SHAMN_INPUT_CHECK(false, "'", path_, "': dataset '", dataset_path,
                      "' has an unsupported element type (want float32, int32, int8 or uint8)");
  Tensor t = Tensor::empty(dataset_shape(dataset_path), dt);
  if (t.numel() > 0)
    SHAMN_INPUT_CHECK(H5Dread(dataset.id, native_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) >= 0,
                      "'", path_, "': reading dataset '", dataset_path,
                      "' failed (the file may be truncated)");
  // Files written before checksums existed (or by other tools) have none to verify.
  if (H5Aexists(dataset.id, kChecksumAttribute) > 0) {
    Handle attr{H5Aopen(dataset.id, kChecksumAttribute, H5P_DEFAULT), H5Aclose};
    uint32_t stored = 0;
    SHAMN_INPUT_CHECK(attr.id >= 0 && H5Aread(attr.id, H5T_NATIVE_UINT32, &stored) >= 0, "'", path_,
                      "': cannot read the checksum of '", dataset_path, "'");
    const uint32_t actual = checksum(t);
    SHAMN_INPUT_CHECK(stored == actual, "'", path_, "': dataset '", dataset_path,
                      "' fails its checksum (stored crc32 ", stored, ", computed ", actual,
                      "): the file is corrupt");
  }
  return t;
}

bool Hdf5Reader::has_attribute(const std::string& name) const { return H5Aexists(file_, name.c_str()) > 0; }

std::string Hdf5Reader::string_attribute(const std::string& name) const {
  SHAMN_INPUT_CHECK(has_attribute(name), "'", path_, "' has no root attribute '", name, "'");
  Handle attr{H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose};
  Handle type{H5Aget_type(attr.id), H5Tclose};
  SHAMN_INPUT_CHECK(H5Tget_class(type.id) == H5T_STRING, "'", path_, "': attribute '", name,
                    "' is not a string");
  if (H5Tis_variable_str(type.id) > 0) {
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    char* data = nullptr;
    SHAMN_INPUT_CHECK(H5Aread(attr.id, mem.id, &data) >= 0 && data, "'", path_, "': cannot read attribute '",
                      name, "'");
    std::string out(data);
    Handle space{H5Aget_space(attr.id), H5Sclose};
    H5Dvlen_reclaim(mem.id, space.id, H5P_DEFAULT, &data);
    return out;
  }
  const size_t size = H5Tget_size(type.id);
  SHAMN_INPUT_CHECK(size > 0 && size <= static_cast<size_t>(file_bytes_), "'", path_, "': attribute '", name,
                    "' claims ", size, " bytes, more than the whole file (", file_bytes_,
                    " bytes): the file is corrupt");
  std::string out(size, '\0');
  SHAMN_INPUT_CHECK(H5Aread(attr.id, type.id, out.data()) >= 0, "'", path_, "': cannot read attribute '",
                    name, "'");
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

int64_t Hdf5Reader::int_attribute(const std::string& name) const {
  int64_t value = 0;
  read_scalar_attribute(name, H5T_INTEGER, H5T_NATIVE_INT64, "an integer", &value);
  return value;
}

double Hdf5Reader::float_attribute(const std::string& name) const {
  double value = 0;
  read_scalar_attribute(name, H5T_FLOAT, H5T_NATIVE_DOUBLE, "a float", &value);
  return value;
}

void Hdf5Reader::read_scalar_attribute(const std::string& name, int type_class, int64_t native_type,
                                       const char* kind, void* out) const {
  SHAMN_INPUT_CHECK(has_attribute(name), "'", path_, "' has no root attribute '", name, "'");
  Handle attr{H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose};
  Handle type{H5Aget_type(attr.id), H5Tclose};
  SHAMN_INPUT_CHECK(H5Tget_class(type.id) == type_class, "'", path_, "': attribute '", name, "' is not ",
                    kind);
  SHAMN_INPUT_CHECK(H5Aread(attr.id, native_type, out) >= 0, "'", path_, "': cannot read attribute '", name,
                    "'");
}

}  // namespace shamn
