#pragma once
// Which SIMD level the kernels run at: one choice for the whole process, made at
// start-up and shared by the training kernels (core/) and the quantised runtime
// (infer/). Every kernel family is compiled once per level (core/isa.h), so one
// binary runs on any x86-64 CPU of its baseline and uses what the CPU has.
//
// The level is the CPU's best (best_kernel_level), or the one
// SHAMN_KERNEL=scalar|avx2|avx512 names in the environment; --kernel on the
// inference commands, and tests, override either (set_kernel_level).
#include <string>

namespace shamn {

// scalar: portable C++ (the compiler may still vectorise it for the baseline);
// avx2: AVX2 + FMA; avx512: AVX-512 F/BW/VL with VNNI.
enum class KernelLevel { scalar = 0, avx2 = 1, avx512 = 2 };
inline constexpr int kKernelLevels = 3;

bool kernel_level_supported(KernelLevel level);
KernelLevel best_kernel_level();
const char* kernel_level_name(KernelLevel level);
// "scalar" | "avx2" | "avx512"; throws InputError naming `what` (e.g. "--kernel")
// on any other name or on a level this CPU cannot run.
KernelLevel kernel_level_from_string(const std::string& name, const std::string& what);
// SHAMN_KERNEL when set, else best_kernel_level(). Throws InputError naming the
// variable when it is unknown or names a level this CPU cannot run.
KernelLevel default_kernel_level();

// The level in use. Process-wide; reading it is one relaxed atomic load.
KernelLevel kernel_level();
// Throws InputError when the CPU lacks the level.
void set_kernel_level(KernelLevel level);

// One entry per level, indexed by KernelLevel: a kernel family's table of
// function pointers (see core/isa.h), picked for the level in use.
template <class Table>
const Table& for_kernel_level(const Table* const (&tables)[kKernelLevels]) {
  return *tables[static_cast<int>(kernel_level())];
}

// Sets a level for a scope and restores the previous one (tests, benchmarks).
class ScopedKernelLevel {
 public:
  explicit ScopedKernelLevel(KernelLevel level) : saved_(kernel_level()) { set_kernel_level(level); }
  ~ScopedKernelLevel() { set_kernel_level(saved_); }
  ScopedKernelLevel(const ScopedKernelLevel&) = delete;
  ScopedKernelLevel& operator=(const ScopedKernelLevel&) = delete;

 private:
  KernelLevel saved_;
};

}  // namespace shamn
