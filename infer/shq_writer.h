#pragma once
// Builds a .shq file image (infer/shq_format.h) in memory: tensors are added
// in order, then image() lays out header, directory, config, tokenizer and the
// 64-byte-aligned data, with every checksum filled in.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "infer/shq_format.h"

namespace shamn {

class ShqWriter {
 public:
  ShqWriter(ShqQuant quant, std::string config_toml, std::string tokenizer_text, int64_t step);

  // data must hold exactly the bytes dtype and shape imply.
  void add(const std::string& name, ShqDType dtype, const Shape& shape, std::vector<uint8_t> data);
  std::vector<uint8_t> image() const;
  // ShqHeader::source_id (default 0, unknown).
  void set_source_id(uint64_t id) { source_id_ = id; }

 private:
  struct Pending {
    std::string name;
    ShqDType dtype;
    Shape shape;
    std::vector<uint8_t> data;
  };
  ShqQuant quant_;
  std::string config_, tokenizer_;
  int64_t step_;
  uint64_t source_id_ = 0;
  std::vector<Pending> tensors_;
};

}  // namespace shamn
