# Sanitizer builds (scripts/sanitize.sh). GIFT_SANITIZE selects one:
#   address  ASan + UBSan (GCC or clang): every CPU test but the exhaustive
#            ones, in build-asan;
#   thread   TSan: the concurrency tests, in build-tsan;
#   fuzz     clang only: libFuzzer coverage instrumentation + ASan + UBSan on
#            the project code; the targets in fuzz/ add -fsanitize=fuzzer
#            (GIFT_BUILD_FUZZ), in build-fuzz.
# Each is -O1 -g with frame pointers, applied to every C++ target defined
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

set(_gift_san_common -O1 -g -fno-omit-frame-pointer)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # Full -g, without GCC's variable-location tracking: sanitizer reports
  # need only the line tables, and the tracking costs the Eigen-heavy files
  # a fifth of their compile time (linalg/nystrom.cc: 107 s -> 88 s here).
  list(APPEND _gift_san_common -fno-var-tracking-assignments)
endif()
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
foreach(f IN LISTS _gift_san_compile)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${f}>)
endforeach()
add_link_options(${_gift_san_link})
message(STATUS "GIFT: sanitizer build ${GIFT_SANITIZE}: ${_gift_san_compile}")
