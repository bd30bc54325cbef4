# What `cmake --install <build> [--prefix P]` puts under the prefix:
#   lib/libgift.so*                  the public API (client/api/)
#   include/gift/*.h                 its headers (C++ API and c_api.h)
#   bin/giftd, bin/giftctl           the daemon and its CLI
#   lib/cmake/gift/                  find_package(gift): imported gift::gift
#   lib/pkgconfig/gift.pc            pkg-config --cflags --libs gift
# (lib is CMAKE_INSTALL_LIBDIR.) The package and gift.pc are relocatable:
# both find the prefix from their own location, so a tree installed with
# --prefix or DESTDIR, or moved, still works. tests/api/install_test.sh
# installs into a temporary prefix and builds C and C++ consumers against it.
include(CMakePackageConfigHelpers)

set(GIFT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gift)

install(TARGETS gift EXPORT giftTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gift
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(TARGETS giftd giftctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT giftTargets
  NAMESPACE gift::
  FILE giftTargets.cmake
  DESTINATION ${GIFT_CMAKE_DIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/giftConfig.cmake.in
  ${PROJECT_BINARY_DIR}/giftConfig.cmake
  INSTALL_DESTINATION ${GIFT_CMAKE_DIR})
# 0.x: minor versions may break the API (as the SOVERSION says).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(GIFT_VERSION_COMPATIBILITY SameMinorVersion)
else()
  set(GIFT_VERSION_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/giftConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${GIFT_VERSION_COMPATIBILITY})
install(FILES
  ${PROJECT_BINARY_DIR}/giftConfig.cmake
  ${PROJECT_BINARY_DIR}/giftConfigVersion.cmake
  DESTINATION ${GIFT_CMAKE_DIR})

# gift.pc: the prefix relative to the .pc file's own folder.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(GIFT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(GIFT_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH GIFT_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" GIFT_PC_UP "${GIFT_PC_UP}")
  set(GIFT_PC_PREFIX "\${pcfiledir}/${GIFT_PC_UP}")
  set(GIFT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(GIFT_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(GIFT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/gift.pc.in
  ${PROJECT_BINARY_DIR}/gift.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gift.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
