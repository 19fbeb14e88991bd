# `cmake --install`: headers, the static library, minidl-launch and a CMake
# package, so that another project writes
#   find_package(minidl REQUIRED)
#   target_link_libraries(app PRIVATE minidl::minidl)
# `make test-install` (scripts/test-install.sh) checks all of it.
include(CMakePackageConfigHelpers)

# Headers keep their layout under <prefix>/include/minidl/, the path every
# #include "minidl/..." names. Kernel internals (ops/cpu, ops/cuda,
# ops/cudnn) and the launcher's source are not part of the API: no installed
# header includes them (test-install compiles all installed headers against
# the installed tree alone).
#
# ABI: the library is compiled with -march=native, consumers are not. That is
# safe because no installed header has Eigen (ops/cpu/gemm.h is not
# installed), SIMD types, alignas or anything else whose layout depends on the
# target ISA: the structs that cross the boundary have the same layout at any
# -march. Keep Eigen and intrinsics out of public headers.
#
# core/cuda/*.h (streams, error checks, library handles) include CUDA's
# headers: installed only by a CUDA build, and a consumer that includes them
# links CUDA::cudart (find_package(CUDAToolkit)) for the include path, since
# minidl links the CUDA libraries PRIVATE. core/cuda.h needs nothing.
if(MINIDL_CUDA)
  set(minidl_exclude_cuda_runtime "^$")  # matches no directory
else()
  set(minidl_exclude_cuda_runtime "/core/cuda$")
endif()
foreach(dir core ops nn optim data models dist)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minidl
          FILES_MATCHING PATTERN "*.h"
          REGEX "/ops/(cpu|cuda|cudnn)$" EXCLUDE
          REGEX "${minidl_exclude_cuda_runtime}" EXCLUDE
          REGEX "/dist/launch$" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/minidl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minidl)

install(TARGETS minidl minidl-launch EXPORT minidlTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(minidl_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/minidl)
install(EXPORT minidlTargets NAMESPACE minidl:: DESTINATION ${minidl_cmake_dir})

# Components: `dist` (process groups over Gloo, DDP, SyncBatchNorm) is always
# built; `cuda` only with -DMINIDL_CUDA=ON.
set(MINIDL_COMPONENTS dist)
if(MINIDL_CUDA)
  list(APPEND MINIDL_COMPONENTS cuda)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/minidlConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/minidlConfig.cmake
                              INSTALL_DESTINATION ${minidl_cmake_dir})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/minidlConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/minidlConfig.cmake ${PROJECT_BINARY_DIR}/minidlConfigVersion.cmake
        DESTINATION ${minidl_cmake_dir})
