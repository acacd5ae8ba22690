#include "core/kernel_level.h"

#include <atomic>
#include <cstdlib>

#include "core/check.h"

namespace shamn {
namespace {

constexpr KernelLevel kAll[] = {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512};

std::atomic<KernelLevel>& current_level() {
  static std::atomic<KernelLevel> level{default_kernel_level()};
  return level;
}

}  // namespace

bool kernel_level_supported(KernelLevel level) {
  __builtin_cpu_init();
  switch (level) {
    case KernelLevel::scalar:
      return true;
    case KernelLevel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case KernelLevel::avx512:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

KernelLevel best_kernel_level() {
  if (kernel_level_supported(KernelLevel::avx512)) return KernelLevel::avx512;
  if (kernel_level_supported(KernelLevel::avx2)) return KernelLevel::avx2;
  return KernelLevel::scalar;
}

const char* kernel_level_name(KernelLevel level) {
  switch (level) {
    case KernelLevel::scalar:
      return "scalar";
    case KernelLevel::avx2:
      return "avx2";
    case KernelLevel::avx512:
      return "avx512";
  }
  return "?";
}

KernelLevel kernel_level_from_string(const std::string& name, const std::string& what) {
  // "--kernel 'x'" for a flag, "SHAMN_KERNEL='x'" for the variable.
  const char* sep = what.starts_with("-") ? " " : "=";
  for (KernelLevel level : kAll) {
    if (name != kernel_level_name(level)) continue;
    SHAMN_INPUT_CHECK(kernel_level_supported(level), what, sep, name,
                      ": this CPU cannot run it; its best is ", kernel_level_name(best_kernel_level()));
    return level;
  }
  SHAMN_INPUT_CHECK(false, what, sep, "'", name, "' is unknown: use scalar, avx2 or avx512");
  return KernelLevel::scalar;
}

KernelLevel default_kernel_level() {
  const char* forced = std::getenv("SHAMN_KERNEL");
  if (forced == nullptr || *forced == '\0') return best_kernel_level();
  return kernel_level_from_string(forced, "SHAMN_KERNEL");
}

KernelLevel kernel_level() { return current_level().load(std::memory_order_relaxed); }

void set_kernel_level(KernelLevel level) {
  SHAMN_INPUT_CHECK(kernel_level_supported(level), "kernel level ", kernel_level_name(level),
                    " needs CPU features this machine lacks; its best is ",
                    kernel_level_name(best_kernel_level()));
  current_level().store(level, std::memory_order_relaxed);
}

}  // namespace shamn
