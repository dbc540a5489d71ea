# Install rules of libdmuon: the library, its public C/C++ headers, a CMake
# package (find_package(dmuon) -> dmuon::dmuon) and a pkg-config file
# (pkg-config --cflags --libs dmuon); and the tools that make and read its
# plans (dmuonc, dmuon-plan) with the plan schema (plan.fbs). Included from
# the top-level CMakeLists.txt after runtime/ and tools/ defined the targets.
#
# The runtime's headers need nothing but the C/C++ standard library (the
# host's MPI_Comm / ncclComm_t travel as void*), and its MPI, BLAS and kernel
# dependencies are private to the shared library, so a consumer needs no
# find_dependency.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DMUON_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dmuon
    CACHE STRING "Where dmuonConfig.cmake is installed, relative to the prefix")

install(TARGETS dmuon
  EXPORT dmuonTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The NCCL backend plugin (built only with CUDA and NCCL): libdmuon dlopens it
# from its own directory, so it goes beside libdmuon.so. A MODULE, not part of
# the exported package.
if(TARGET dmuon-nccl)
  install(TARGETS dmuon-nccl
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()

install(FILES
  ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.h
  ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dmuon
  COMPONENT dev)

# The tools: dmuonc compiles plans, dmuon-plan verifies and prints them. The
# schema goes beside the headers, for readers of plans built with flatc.
if(DMUON_BUILD_COMPILER)
  install(TARGETS dmuonc dmuon-plan
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/include/dmuon/plan.fbs
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dmuon
  COMPONENT dev)

install(EXPORT dmuonTargets
  NAMESPACE dmuon::
  DESTINATION ${DMUON_INSTALL_CMAKEDIR}
  COMPONENT dev)

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/dmuonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/dmuonConfig.cmake
  INSTALL_DESTINATION ${DMUON_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
# 0.x: a new minor may break the ABI, so only the same minor is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/dmuonConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/dmuonConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/dmuonConfigVersion.cmake
  DESTINATION ${DMUON_INSTALL_CMAKEDIR}
  COMPONENT dev)

# pkg-config: paths relative to the installed .pc file, so the prefix can be
# moved (and `cmake --install --prefix` works) without reconfiguring.
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(DMUON_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(DMUON_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(DMUON_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(DMUON_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
# ${pcfiledir} is <prefix>/<libdir>/pkgconfig: climb back to the prefix.
set(_dmuon_pc_up "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
string(REGEX REPLACE "[^/]+" ".." _dmuon_pc_up "${_dmuon_pc_up}")
set(DMUON_PC_PREFIX "\${pcfiledir}/${_dmuon_pc_up}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/dmuon.pc.in ${PROJECT_BINARY_DIR}/cmake/dmuon.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/dmuon.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
