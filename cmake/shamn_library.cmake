# shamn_library(<folder> SOURCES ... [ISA_SOURCES ...] [DEPENDS <folder>...] [LINK <target>...])
#
# ISA_SOURCES are kernel families compiled once per SIMD level, with
# SHAMN_ISA_LEVEL = 0 (scalar), 1 (avx2) and 2 (avx512): see core/isa.h.
#
# One static library per source folder, `shamn_<folder>`, with its declared
# dependencies. The layering is enforced, not hoped for: sources include headers
# by their path from the repository root ("core/tensor.h"), but a library's
# include path does not hold the repository root. It holds an include root of
# its own, a directory with a single link, <folder> -> the source folder, and
# gets its dependencies' roots through target_link_libraries. A header of a
# folder that is not a (transitive) dependency is then simply not found, so an
# upward include fails to compile (tests/layering checks that it does).
function(shamn_library folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;ISA_SOURCES;DEPENDS;LINK" ${ARGN})
  set(target shamn_${folder})
  add_library(${target} STATIC ${ARG_SOURCES})
  set(root ${PROJECT_BINARY_DIR}/include_roots/${folder})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  target_include_directories(${target} PUBLIC ${root})
  list(TRANSFORM ARG_DEPENDS PREPEND shamn_)
  target_link_libraries(${target} PUBLIC ${ARG_DEPENDS} ${ARG_LINK} shamn_build_flags)
  target_compile_options(${target} PRIVATE ${SHAMN_WARNINGS})
  if(ARG_ISA_SOURCES)
    foreach(level 0 1 2)
      set(isa ${target}_isa${level})
      add_library(${isa} OBJECT ${ARG_ISA_SOURCES})
      target_include_directories(${isa} PRIVATE ${root})
      target_link_libraries(${isa} PRIVATE ${ARG_DEPENDS} ${ARG_LINK} shamn_build_flags)
      target_compile_definitions(${isa} PRIVATE SHAMN_ISA_LEVEL=${level})
      target_compile_options(${isa} PRIVATE ${SHAMN_WARNINGS})
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:${isa}>)
    endforeach()
  endif()
endfunction()
