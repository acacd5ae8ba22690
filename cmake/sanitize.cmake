# SHAMN_SANITIZE: build every target (library, CLI, tests, benchmarks) with
# GCC's sanitizers, for .ci/sanitize. Included before any target is defined, so
# the directory-wide options below reach them all.
#
#   -DSHAMN_SANITIZE=address,undefined   ASan + UBSan (any combination of the two)
#   -DSHAMN_SANITIZE=thread              TSan (optionally with undefined)
set(SHAMN_SANITIZE "" CACHE STRING
    "Sanitizers for every target: address,undefined or thread (empty: none)")

if(SHAMN_SANITIZE STREQUAL "")
  return()
endif()

string(REPLACE "," ";" shamn_sanitizers "${SHAMN_SANITIZE}")
foreach(s IN LISTS shamn_sanitizers)
  if(NOT s MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "SHAMN_SANITIZE=${SHAMN_SANITIZE}: unknown sanitizer '${s}'; "
                        "use address,undefined or thread")
  endif()
endforeach()
if("address" IN_LIST shamn_sanitizers AND "thread" IN_LIST shamn_sanitizers)
  message(FATAL_ERROR "SHAMN_SANITIZE=${SHAMN_SANITIZE}: address and thread cannot be combined "
                      "(their runtimes own the same shadow memory); build them in two directories")
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "SHAMN_SANITIZE needs GCC or Clang")
endif()

# Line tables only (-g1): a report's frames keep their function, file and line
# (inlined frames too), and each translation unit compiles in about 0.75x the
# time of full -g (experiments/ci_time.md). -DSHAMN_SANITIZE_DEBUG=-g for a debugger.
set(SHAMN_SANITIZE_DEBUG "-g1" CACHE STRING "Debug information of a sanitizer build")
set(shamn_sanitize_flags -fsanitize=${SHAMN_SANITIZE} -fno-omit-frame-pointer ${SHAMN_SANITIZE_DEBUG})
if("undefined" IN_LIST shamn_sanitizers)
  # Any UB report is an error that stops the program, not a line in the log.
  list(APPEND shamn_sanitize_flags -fno-sanitize-recover=undefined)
endif()
# The optimisation level replaces the build type's: -O3 makes sanitized
# stacks hard to read and costs build time; -O0 makes the suite several times
# slower. -O1 keeps both reasonable (.ci/sanitize's timings).
set(SHAMN_SANITIZE_OPT "-O1" CACHE STRING "Optimisation level of a sanitizer build")
foreach(config RELEASE RELWITHDEBINFO MINSIZEREL DEBUG)
  string(REGEX REPLACE "-O[0-3sgz]?( |$)" "" CMAKE_CXX_FLAGS_${config} "${CMAKE_CXX_FLAGS_${config}}")
  string(REGEX REPLACE "-O[0-3sgz]?( |$)" "" CMAKE_C_FLAGS_${config} "${CMAKE_C_FLAGS_${config}}")
endforeach()

add_compile_options(${shamn_sanitize_flags} ${SHAMN_SANITIZE_OPT})
add_link_options(${shamn_sanitize_flags})
message(STATUS "shamn: sanitizers ${SHAMN_SANITIZE}, ${SHAMN_SANITIZE_OPT}")
