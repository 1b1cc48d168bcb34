# Installs the libraries, public headers and a CMake package (pipewrightConfig.cmake with the
# exported targets pipewright::graph, ::sched, ::sim and, where built, ::exec) and pipewright.pc
# for pkg-config. docs/library.md shows how a project consumes them.
include(CMakePackageConfigHelpers)

set(_pw_targets pw_graph pw_sched pw_sim)
set(_pw_header_dirs graph sched sim)
if(TARGET pw_exec)
  # exec's public headers hold only pipewright's and the standard library's types (libtorch,
  # Gloo, MPI and NCCL stay in its .cpp files), so they install like the others. A static
  # pw_exec would need all of those to link; it is installed only as a shared library.
  if(BUILD_SHARED_LIBS)
    list(APPEND _pw_targets pw_exec)
  endif()
  list(APPEND _pw_header_dirs exec)
endif()
foreach(_pw_target IN LISTS _pw_targets)
  string(REPLACE "pw_" "" _pw_export_name ${_pw_target})
  set_target_properties(${_pw_target} PROPERTIES EXPORT_NAME ${_pw_export_name}
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
endforeach()
install(TARGETS ${_pw_targets} EXPORT pipewrightTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# graph/json_reader.hpp is the loaders' shared reader over nlohmann::json (a third-party type):
# no other public header includes it, and it is not installed.
foreach(_pw_dir IN LISTS _pw_header_dirs)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_pw_dir}/include/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp"
          PATTERN "json_reader.hpp" EXCLUDE)
endforeach()

set(_pw_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/pipewright)
install(EXPORT pipewrightTargets NAMESPACE pipewright:: DESTINATION ${_pw_cmake_dir})
set(PIPEWRIGHT_CONFIG_SHARED ${BUILD_SHARED_LIBS})
set(PIPEWRIGHT_CONFIG_GRAPHVIZ ${PIPEWRIGHT_WITH_GRAPHVIZ})
set(PIPEWRIGHT_CONFIG_CHAKRA ${PIPEWRIGHT_WITH_CHAKRA})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/pipewrightConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/pipewrightConfig.cmake INSTALL_DESTINATION ${_pw_cmake_dir})
# 0.x: a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/pipewrightConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/pipewrightConfig.cmake
              ${CMAKE_BINARY_DIR}/package/pipewrightConfigVersion.cmake
        DESTINATION ${_pw_cmake_dir})

# pipewright.pc: graph, sched and sim (what the CLI's offline commands use). The prefix is
# found from the .pc file's own place, so `cmake --install build --prefix P` works for any P.
set(PIPEWRIGHT_PC_LIBS_PRIVATE "")
if(NOT BUILD_SHARED_LIBS)
  set(PIPEWRIGHT_PC_LIBS_PRIVATE "-lstdc++")
endif()
set(PIPEWRIGHT_PC_REQUIRES_PRIVATE "")
if(NOT BUILD_SHARED_LIBS AND PIPEWRIGHT_WITH_GRAPHVIZ)
  set(PIPEWRIGHT_PC_REQUIRES_PRIVATE "libgvc")
endif()
file(RELATIVE_PATH PIPEWRIGHT_PC_TO_PREFIX /pw/${CMAKE_INSTALL_LIBDIR}/pkgconfig /pw)
string(REGEX REPLACE "/$" "" PIPEWRIGHT_PC_TO_PREFIX "${PIPEWRIGHT_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/pipewright.pc.in ${CMAKE_BINARY_DIR}/package/pipewright.pc
               @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/pipewright.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
