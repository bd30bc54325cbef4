# Per-file exceptions of the sanitizer builds (cmake/Sanitizers.cmake),
# included at the end of the top-level CMakeLists.txt, once every directory
# exists. Each names the reason.
if(GIFT_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC instruments the ifunc resolvers of target_clones functions
  # (kernels/quantize.cc FiniteAmax, and fp8.cc, accumulate.cc), and those
  # run during relocation, before the TSan runtime is up: every binary that
  # links them dies with SIGSEGV before main. The three files are per-call
  # numerics without shared state; they build without TSan.
  set_property(SOURCE
      ${PROJECT_SOURCE_DIR}/kernels/fp8.cc
      ${PROJECT_SOURCE_DIR}/kernels/accumulate.cc
      ${PROJECT_SOURCE_DIR}/kernels/quantize.cc
    DIRECTORY ${PROJECT_SOURCE_DIR}/kernels
    APPEND PROPERTY COMPILE_OPTIONS -fno-sanitize=thread)
endif()
