// The unit suite's entry point: Catch2's, after one check of SHAMN_KERNEL. CTest
// runs the suite once per kernel level (tests/CMakeLists.txt); a level this CPU
// lacks exits 77, CTest's skip, so the suite passes on any x86-64 machine.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <string>

#include "core/kernel_level.h"

int main(int argc, char* argv[]) {
  if (const char* forced = std::getenv("SHAMN_KERNEL"); forced && *forced) {
    bool known = false;
    for (shamn::KernelLevel level :
         {shamn::KernelLevel::scalar, shamn::KernelLevel::avx2, shamn::KernelLevel::avx512}) {
      if (forced != std::string(shamn::kernel_level_name(level))) continue;
      known = true;
      if (!shamn::kernel_level_supported(level)) {
        std::cout << "skipped: SHAMN_KERNEL=" << forced << " needs CPU features this machine lacks\n";
        return 77;
      }
    }
    if (!known) {
      std::cerr << "SHAMN_KERNEL='" << forced << "' is unknown: use scalar, avx2 or avx512\n";
      return 2;
    }
  }
  return Catch::Session().run(argc, argv);
}
