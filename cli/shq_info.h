#pragma once
// `shamn info FILE.shq`: what a model file or a LoRA adapter file holds, read
// through the checked loader (every region's CRC-32 is verified on open).
#include <string>

namespace shamn::cli {

void print_shq_info(const std::string& path);

}  // namespace shamn::cli
