# `cpack -G DEB` in the build folder: one package, ernie-image, with the CLI in /usr/bin, libernie-image.so, the
# header, ernie-image.pc, the CMake package, the docs, and ernie-image.service (`ernie-image serve`, installed
# disabled, settings in /etc/ernie-image/serve.env). Release packages: -DERNIE_CUDA_ARCHS=all (docs/library.md).
set(ERNIE_PACKAGE_PREFIX /usr)

# The service files have absolute destinations (/etc, /lib/systemd), so they are left out of a plain
# `cmake --install` (EXCLUDE_FROM_ALL) and go into the package only.
configure_file(${CMAKE_CURRENT_LIST_DIR}/ernie-image.service.in ${CMAKE_CURRENT_BINARY_DIR}/ernie-image.service @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ernie-image.service DESTINATION /lib/systemd/system
  COMPONENT service EXCLUDE_FROM_ALL)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/serve.env DESTINATION /etc/ernie-image COMPONENT service EXCLUDE_FROM_ALL)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/debian/conffiles "/etc/ernie-image/serve.env\n")
file(COPY ${CMAKE_CURRENT_LIST_DIR}/postinst ${CMAKE_CURRENT_LIST_DIR}/prerm ${CMAKE_CURRENT_LIST_DIR}/postrm
  DESTINATION ${CMAKE_CURRENT_BINARY_DIR}/debian)

set(CPACK_PACKAGE_NAME ernie-image)
set(CPACK_PACKAGE_VENDOR "ernie-image")
set(CPACK_PACKAGE_CONTACT "ernie-image maintainers <ernie-image@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "ERNIE-Image text-to-image engine: CLI, HTTP server and C library")
set(CPACK_PACKAGE_DESCRIPTION "A native C++/CUDA engine for Baidu's ERNIE-Image and ERNIE-Image-Turbo models:
the ernie-image command (generate, serve, doctor, convert), libernie-image.so with its C API, header,
pkg-config file and CMake package, and ernie-image.service for the HTTP server (disabled by default).")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${ERNIE_PACKAGE_PREFIX})
set(CPACK_STRIP_FILES ON)
# Every component in one package, the service's (EXCLUDE_FROM_ALL) included.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL runtime library development service)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION graphics)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://huggingface.co/baidu/ERNIE-Image")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)          # Depends from dpkg-shlibdeps (dpkg-dev)
if(ERNIE_HAVE_CUDA)
  # NVIDIA's libraries (CUDA toolkit, cuDNN) often come from outside dpkg: dpkg-shlibdeps finds them here and,
  # without a package to name, leaves them out of Depends (docs/library.md: the package needs the CUDA runtime).
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CUDAToolkit_LIBRARY_DIR})
endif()
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)    # a shlibs file for libernie-image.so.0
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_BINARY_DIR}/debian/conffiles
  ${CMAKE_CURRENT_BINARY_DIR}/debian/postinst ${CMAKE_CURRENT_BINARY_DIR}/debian/prerm
  ${CMAKE_CURRENT_BINARY_DIR}/debian/postrm)
include(CPack)
