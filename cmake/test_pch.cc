// The host of the tests' precompiled header (gift_test_pch in the top-level
// CMakeLists.txt): CMake compiles the header with this target's flags, which
// are every gift_add_test target's. Nothing runs it.
