#pragma once
// Reading a whole input file into memory, with errors that name it. A directory
// is refused by name (std::ifstream reports it only as a stream exception), and
// so is a FIFO unless the caller reads streams (`shamn tokenizer encode --input
// <(...)`): a file the user meant to be regular must not wait forever on open.
#include <string>

namespace shamn {

enum class PipePolicy { refuse, allow };

// The bytes of `path`; `what` names the file in errors ("tokenizer file").
std::string read_whole_file(const std::string& path, const std::string& what,
                            PipePolicy pipes = PipePolicy::refuse);

}  // namespace shamn
