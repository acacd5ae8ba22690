#pragma once
// A .shq model file (infer/shq_format.h), mapped read-only and checked before
// anything reads it: the loader trusts nothing in the file. Every offset,
// length, shape product and block count is checked with overflow-safe
// arithmetic against the file size, regions may not overlap, and the header,
// directory, config, tokenizer and every tensor's data carry a CRC-32 that is
// verified on open. Any failure is an InputError naming the file and, where
// there is one, the tensor.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "infer/shq_format.h"

namespace shamn {

struct ShqTensor {
  std::string name;
  ShqDType dtype = ShqDType::f32;
  Shape shape;
  const void* data = nullptr;  // inside the mapping, 64-byte aligned
  uint64_t bytes = 0;
};

class ShqFile {
 public:
  // mmap. `what` names the file in errors: "model file", "adapter file".
  static ShqFile open(const std::string& path, const std::string& what = "model file");
  // Checks a copy of `bytes` (tests, the fuzzer, and export's self-check).
  static ShqFile from_bytes(const void* bytes, size_t size, const std::string& origin,
                            const std::string& what = "model file");

  const std::string& path() const { return path_; }
  const ShqHeader& header() const { return header_; }
  ShqQuant quant() const { return static_cast<ShqQuant>(header_.quant); }
  uint64_t file_bytes() const { return size_; }
  std::string config_toml() const;
  std::string tokenizer_text() const;  // "" when the file has none
  const std::vector<ShqTensor>& tensors() const { return tensors_; }
  // InputError naming the file and tensor when it is missing.
  const ShqTensor& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const;

 private:
  ShqFile() = default;
  void parse();

  std::string path_;
  std::string what_ = "model file";
  std::shared_ptr<const uint8_t> base_;  // the mapping or an aligned copy
  size_t size_ = 0;
  ShqHeader header_{};
  std::vector<ShqTensor> tensors_;  // directory order
};

// Bytes a tensor of this dtype and shape takes; false on overflow or a bad dtype.
bool shq_tensor_bytes(ShqDType dtype, const Shape& shape, uint64_t* bytes);

}  // namespace shamn
