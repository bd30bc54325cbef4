# Sanitizer builds (scripts/sanitize.sh). GIFT_SANITIZE selects one:
#   address  ASan + UBSan (GCC or clang);
#   thread   TSan: the concurrency tests, in build-tsan;
#   fuzz     clang only: libFuzzer coverage instrumentation + ASan + UBSan on
#            the project code; the targets in fuzz/ add -fsanitize=fuzzer
#            (GIFT_BUILD_FUZZ). make sanitize's build-asan is this build
#            with the tests too: its ASan part runs the CPU tests in it, its
#            fuzz part the fuzz targets (make fuzz alone: build-fuzz).
# Each is -O1 -g1 with frame pointers, applied to every C++ target defined
# after this file is included (the whole project). System libraries (gRPC,
# protobuf, abseil, gloo, yaml-cpp) stay uninstrumented; scripts/sanitize.sh
# says how each pass deals with that.
set(GIFT_SANITIZE "" CACHE STRING "Sanitizer build: \"\" | address | thread | fuzz")
set_property(CACHE GIFT_SANITIZE PROPERTY STRINGS "" address thread fuzz)

if(GIFT_SANITIZE STREQUAL "")
  return()
endif()
if(GIFT_HAVE_CUDA)
  message(FATAL_ERROR "GIFT_SANITIZE=${GIFT_SANITIZE} needs GIFT_CUDA=OFF")
endif()

# -g1: line tables and the inlined-call tree, which is all a sanitizer report
# or a suppression reads (ASan's stack-object names come from its own frame
# descriptions, not from DWARF). Without the variable and type descriptions
# of -g the objects are smaller and compile in less CPU time under ASan+UBSan
# (user seconds: daemon/core/daemon_test.cc at -O0 8.8 -> 7.2,
# client/giftd_connection.cc at -O1 8.1 -> 7.6).
set(_gift_san_common -O1 -g1 -fno-omit-frame-pointer)
if(GIFT_SANITIZE STREQUAL "address")
  set(_gift_san_compile -fsanitize=address,undefined
      -fno-sanitize-recover=undefined ${_gift_san_common})
  set(_gift_san_link -fsanitize=address,undefined)
elseif(GIFT_SANITIZE STREQUAL "thread")
  set(_gift_san_compile -fsanitize=thread ${_gift_san_common})
  set(_gift_san_link -fsanitize=thread)
elseif(GIFT_SANITIZE STREQUAL "fuzz")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "GIFT_SANITIZE=fuzz needs clang (CXX=clang++-14)")
  endif()
  set(_gift_san_compile -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined ${_gift_san_common})
  set(_gift_san_link -fsanitize=address,undefined)
else()
  message(FATAL_ERROR "GIFT_SANITIZE must be \"\", address, thread or fuzz, "
                      "not \"${GIFT_SANITIZE}\"")
endif()
# The test binaries' own files (gift_add_test) at -O0: the code under test
# keeps -O1, the tests' assertions and set-up need no optimiser, and -O0
# halves their compile time under ASan+UBSan (shm/protocol_test.cc: 12.9 s ->
# 7.7 s), which was most of make sanitize. The fuzz targets keep -O1 (their
# speed is their coverage).
# Under ASan+UBSan (address, fuzz) they are not instrumented either
# (-fno-sanitize=all, the test precompiled header too; in the fuzz build it
# drops the coverage instrumentation of the test files as well): what the
# sanitizers check is the libraries' code, which every test links
# instrumented, and the test files' heap
# allocations still come from ASan's allocator (redzones round every buffer
# a test hands the library; their stack objects have none). That takes 0.5-0.7x
# off each test file's compile time (tests/daemon/giftd_integration_test.cc
# 26.2 -> 13.4 s, daemon/core/daemon_test.cc 10.7 -> 6.5 s), the test files
# being half of the ASan build. Not under TSan, which must see every access
# and atomic of the threads a test starts to judge the library's.
if(GIFT_SANITIZE STREQUAL "address" OR GIFT_SANITIZE STREQUAL "fuzz")
  set(GIFT_TEST_COMPILE_OPTIONS -O0 -fno-sanitize=all)
elseif(GIFT_SANITIZE STREQUAL "thread")
  set(GIFT_TEST_COMPILE_OPTIONS -O0)
endif()
foreach(f IN LISTS _gift_san_compile)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${f}>)
endforeach()
add_link_options(${_gift_san_link})
message(STATUS "GIFT: sanitizer build ${GIFT_SANITIZE}: ${_gift_san_compile}")
