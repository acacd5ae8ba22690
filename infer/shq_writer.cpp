#include "infer/shq_writer.h"

#include <cstring>

#include "core/check.h"
#include "core/checksum.h"
#include "infer/quant_blocks.h"
#include "infer/shq_file.h"

namespace shamn {

namespace {
uint64_t align_up(uint64_t x) { return (x + kShqAlignment - 1) / kShqAlignment * kShqAlignment; }
}  // namespace

ShqWriter::ShqWriter(ShqQuant quant, std::string config_toml, std::string tokenizer_text, int64_t step)
    : quant_(quant), config_(std::move(config_toml)), tokenizer_(std::move(tokenizer_text)), step_(step) {}

void ShqWriter::add(const std::string& name, ShqDType dtype, const Shape& shape, std::vector<uint8_t> data) {
  SHAMN_CHECK(!name.empty() && name.size() < static_cast<size_t>(kShqNameBytes), "tensor name '", name,
              "' does not fit the ", kShqNameBytes - 1, "-byte name field");
  SHAMN_CHECK(!shape.empty() && shape.size() <= static_cast<size_t>(kShqMaxDims), "tensor '", name, "' has ",
              shape.size(), " dims; the format allows 1..", kShqMaxDims);
  uint64_t bytes = 0;
  SHAMN_CHECK(shq_tensor_bytes(dtype, shape, &bytes) && bytes == data.size(), "tensor '", name,
              "': ", data.size(), " bytes for ", shq_dtype_name(dtype), shape_str(shape));
  tensors_.push_back({name, dtype, shape, std::move(data)});
}

std::vector<uint8_t> ShqWriter::image() const {
  ShqHeader h{};
  std::memcpy(h.magic, kShqMagic, sizeof(h.magic));
  h.version = kShqVersion;
  h.header_bytes = sizeof(ShqHeader);
  h.quant = static_cast<uint32_t>(quant_);
  h.tensor_count = static_cast<uint32_t>(tensors_.size());
  h.step = static_cast<uint64_t>(step_);
  h.set_source_id(source_id_);
  h.directory_offset = sizeof(ShqHeader);
  const uint64_t dir_bytes = tensors_.size() * sizeof(ShqTensorEntry);
  h.config_offset = h.directory_offset + dir_bytes;
  h.config_bytes = config_.size();
  h.tokenizer_offset = h.config_offset + h.config_bytes;
  h.tokenizer_bytes = tokenizer_.size();

  std::vector<ShqTensorEntry> dir(tensors_.size());
  uint64_t offset = align_up(h.tokenizer_offset + h.tokenizer_bytes);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Pending& t = tensors_[i];
    ShqTensorEntry& e = dir[i];
    std::memset(&e, 0, sizeof(e));
    std::memcpy(e.name, t.name.data(), t.name.size());
    e.dtype = static_cast<uint32_t>(t.dtype);
    e.ndim = static_cast<uint32_t>(t.shape.size());
    for (size_t d = 0; d < t.shape.size(); ++d) e.shape[d] = t.shape[d];
    e.offset = offset;
    e.bytes = t.data.size();
    e.block = shq_dtype_quantized(t.dtype) ? kQuantBlock : 0;
    e.crc = crc32_bytes(t.data.data(), t.data.size());
    offset = align_up(offset + e.bytes);
  }
  const uint64_t end = tensors_.empty() ? offset : dir.back().offset + dir.back().bytes;
  h.file_bytes = end;
  h.directory_crc = crc32_bytes(dir.data(), dir_bytes);
  h.config_crc = crc32_bytes(config_.data(), config_.size());
  h.tokenizer_crc = crc32_bytes(tokenizer_.data(), tokenizer_.size());
  h.header_crc = crc32_bytes(&h, offsetof(ShqHeader, header_crc));

  std::vector<uint8_t> out(end, 0);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + h.directory_offset, dir.data(), dir_bytes);
  std::memcpy(out.data() + h.config_offset, config_.data(), config_.size());
  std::memcpy(out.data() + h.tokenizer_offset, tokenizer_.data(), tokenizer_.size());
  for (size_t i = 0; i < tensors_.size(); ++i)
    std::memcpy(out.data() + dir[i].offset, tensors_[i].data.data(), tensors_[i].data.size());
  return out;
}

}  // namespace shamn
