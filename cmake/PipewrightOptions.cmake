# Build options and dependency discovery. Each optional capability defaults to ON when its
# dependency is found, and graph/sched/sim/tools build and test with all of them OFF.

find_package(Boost 1.74 REQUIRED)            # Boost.Graph is header-only
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)

option(PIPEWRIGHT_BUILD_BENCH "Build benchmarks in bench/ (Google Benchmark)" ON)

# A portable executor (tools/bundle-exec, docs/gpu.md "A portable executor"): pipewright,
# pipewright-exec and libpw_*.so then need at run time only libtorch and the C/C++ runtime, so
# they can be copied to a node whose image has PyTorch but none of the build dependencies.
# spdlog, fmt and toml++ are compiled in header-only (CLI11 and nlohmann are header-only always);
# MPI and Graphviz default to OFF.
option(PIPEWRIGHT_PORTABLE "Executor that needs only libtorch and the C/C++ runtime at run time" OFF)
# Chakra execution traces (sim/proto/et_def.proto, docs/interop.md): protoc at build time and
# libprotobuf, private to pw_sim (apt-get install protobuf-compiler libprotobuf-dev). Off in the
# portable executor: Debian's static libprotobuf.a cannot go into a shared library (its
# thread-locals are local-exec) and the bundle carries no libprotobuf.so; export-chakra and
# import-chakra then exit 2 saying so.
set(_pw_chakra_default ON)
if(PIPEWRIGHT_PORTABLE)
  set(_pw_chakra_default OFF)
endif()
option(PIPEWRIGHT_WITH_CHAKRA "Chakra execution traces: export-chakra, import-chakra (protobuf)"
       ${_pw_chakra_default})
if(PIPEWRIGHT_WITH_CHAKRA)
  find_package(Protobuf 3.12)
  if(NOT Protobuf_FOUND OR NOT Protobuf_PROTOC_EXECUTABLE)
    message(FATAL_ERROR "PIPEWRIGHT_WITH_CHAKRA=ON but protobuf was not found (apt-get install protobuf-compiler libprotobuf-dev, or -DPIPEWRIGHT_WITH_CHAKRA=OFF)")
  endif()
endif()
message(STATUS "pipewright: Chakra traces ${PIPEWRIGHT_WITH_CHAKRA}")
# Logging for the CLI programs: the shared libspdlog/libfmt, or header-only when portable.
add_library(pw_log INTERFACE)
if(PIPEWRIGHT_PORTABLE)
  get_target_property(_pw_spdlog_inc spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(pw_log SYSTEM INTERFACE ${_pw_spdlog_inc})
  target_compile_definitions(pw_log INTERFACE SPDLOG_FMT_EXTERNAL)
  target_link_libraries(pw_log INTERFACE fmt::fmt-header-only Threads::Threads)
else()
  target_link_libraries(pw_log INTERFACE spdlog::spdlog)
endif()
# The libFuzzer target tests/fuzz/fuzz_loaders (clang only; tools/fuzz sets it with the sanitizer
# flags). The corpus replay (ctest fuzz.replay) is built with every compiler.
option(PIPEWRIGHT_BUILD_FUZZ "Build the libFuzzer loader target (clang, -fsanitize=fuzzer)" OFF)

# --- libtorch (exec) ---------------------------------------------------------------------
include(PipewrightTorch)  # Debian's libtorch or -DPIPEWRIGHT_TORCH_PYTHON=<venv>/bin/python
set(_pw_exec_default OFF)
if(Torch_FOUND)
  set(_pw_exec_default ON)
endif()
option(PIPEWRIGHT_WITH_EXEC "Build exec/ (libtorch executor, Gloo backend)" ${_pw_exec_default})
if(PIPEWRIGHT_WITH_EXEC AND NOT Torch_FOUND)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_EXEC=ON but libtorch was not found (apt-get install libtorch-dev libgloo-dev, or a pip torch: tools/install-deps --torch pip, then -DPIPEWRIGHT_TORCH_PYTHON=.venv-torch/bin/python)")
endif()

# --- MPI ---------------------------------------------------------------------------------
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI QUIET COMPONENTS CXX)
set(_pw_mpi_default OFF)
if(MPI_CXX_FOUND AND PIPEWRIGHT_WITH_EXEC AND NOT PIPEWRIGHT_PORTABLE)
  set(_pw_mpi_default ON)
endif()
option(PIPEWRIGHT_WITH_MPI "Build the MPI communicator backend (needs exec)" ${_pw_mpi_default})
if(PIPEWRIGHT_WITH_MPI AND NOT PIPEWRIGHT_WITH_EXEC)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_MPI=ON needs PIPEWRIGHT_WITH_EXEC=ON")
endif()
if(PIPEWRIGHT_WITH_MPI AND NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_MPI=ON but MPI was not found (apt-get install libopenmpi-dev)")
endif()

# --- CUDA + NCCL -------------------------------------------------------------------------
find_package(CUDAToolkit QUIET)
find_path(PW_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
find_library(PW_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
set(_pw_nccl_default OFF)
if(CUDAToolkit_FOUND AND PW_NCCL_INCLUDE_DIR AND PW_NCCL_LIBRARY AND PIPEWRIGHT_WITH_EXEC)
  set(_pw_nccl_default ON)
endif()
option(PIPEWRIGHT_WITH_NCCL "Build the NCCL communicator backend (compile + link; needs exec)" ${_pw_nccl_default})
if(PIPEWRIGHT_WITH_NCCL AND NOT (CUDAToolkit_FOUND AND PW_NCCL_INCLUDE_DIR AND PW_NCCL_LIBRARY))
  message(FATAL_ERROR "PIPEWRIGHT_WITH_NCCL=ON but CUDA toolkit or NCCL was not found")
endif()
if(PIPEWRIGHT_WITH_NCCL AND NOT PIPEWRIGHT_WITH_EXEC)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_NCCL=ON needs PIPEWRIGHT_WITH_EXEC=ON")
endif()
if(PIPEWRIGHT_WITH_NCCL)
  # NCCL as an imported target: its headers are then system headers (no -Werror on them).
  file(STRINGS ${PW_NCCL_INCLUDE_DIR}/nccl.h _pw_nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
         PW_NCCL_VERSION "${_pw_nccl_ver}")
  add_library(pw_nccl_imported INTERFACE IMPORTED)
  set_target_properties(pw_nccl_imported PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${PW_NCCL_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES "${PW_NCCL_LIBRARY};$<IF:$<BOOL:${PW_CUDART_LIBRARY}>,${PW_CUDART_LIBRARY},CUDA::cudart>")
  message(STATUS "pipewright: NCCL ON (NCCL ${PW_NCCL_VERSION} ${PW_NCCL_LIBRARY}, CUDA ${CUDAToolkit_VERSION})")
else()
  message(STATUS "pipewright: NCCL OFF")
endif()

# --- Graphviz (libgvc) -------------------------------------------------------------------
find_package(PkgConfig QUIET)
set(_pw_gv_default OFF)
if(PkgConfig_FOUND)
  pkg_check_modules(PW_GVC QUIET IMPORTED_TARGET libgvc)
  if(PW_GVC_FOUND AND NOT PIPEWRIGHT_PORTABLE)
    set(_pw_gv_default ON)
  endif()
endif()
option(PIPEWRIGHT_WITH_GRAPHVIZ "Render SVG/PNG in-process with libgvc" ${_pw_gv_default})
if(PIPEWRIGHT_WITH_GRAPHVIZ AND NOT PW_GVC_FOUND)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_GRAPHVIZ=ON but libgvc was not found (apt-get install libgraphviz-dev)")
endif()

# --- toml++ (`run --config` TOML files; pipewright-exec only) ----------------------------
# Debian's libtomlplusplus-dev ships a CMake config and a pkg-config file. Without it, run reads
# JSON config files only and says so for a TOML one.
find_package(tomlplusplus CONFIG QUIET)
if(PIPEWRIGHT_PORTABLE AND TARGET tomlplusplus::tomlplusplus)
  # Header-only: the same headers, compiled into pipewright-exec instead of libtomlplusplus.so.
  get_target_property(_pw_toml_inc tomlplusplus::tomlplusplus INTERFACE_INCLUDE_DIRECTORIES)
  add_library(pw_toml_header_only INTERFACE)
  target_include_directories(pw_toml_header_only SYSTEM INTERFACE ${_pw_toml_inc})
  target_compile_definitions(pw_toml_header_only INTERFACE TOML_HEADER_ONLY=1)
endif()
if(NOT TARGET tomlplusplus::tomlplusplus AND PkgConfig_FOUND)
  pkg_check_modules(PW_TOMLPP QUIET IMPORTED_TARGET tomlplusplus)
  if(PW_TOMLPP_FOUND)
    add_library(tomlplusplus::tomlplusplus ALIAS PkgConfig::PW_TOMLPP)
  endif()
endif()
set(_pw_toml_default OFF)
if(TARGET tomlplusplus::tomlplusplus AND PIPEWRIGHT_WITH_EXEC)
  set(_pw_toml_default ON)
endif()
option(PIPEWRIGHT_WITH_TOML "Read TOML config files in `run --config` (toml++; needs exec)" ${_pw_toml_default})
if(PIPEWRIGHT_WITH_TOML AND NOT TARGET tomlplusplus::tomlplusplus)
  message(FATAL_ERROR "PIPEWRIGHT_WITH_TOML=ON but toml++ was not found (apt-get install libtomlplusplus-dev)")
endif()
message(STATUS "pipewright: TOML config files ${PIPEWRIGHT_WITH_TOML}")

# --- Python module (pybind11; tools/python) ---------------------------------------------
# Built against Debian's /usr/bin/python3 (the first python3 on PATH may be another one);
# -DPython3_EXECUTABLE=... chooses another interpreter.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python for the pipewright module and its tests")
endif()
find_package(Python3 3.8 QUIET COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
set(_pw_python_default OFF)
# Not in sanitizer builds: an instrumented module cannot load into an uninstrumented python3.
if(Python3_FOUND AND pybind11_FOUND AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  set(_pw_python_default ON)
endif()
option(PIPEWRIGHT_WITH_PYTHON "Build the Python module `pipewright` (pybind11)" ${_pw_python_default})
if(PIPEWRIGHT_WITH_PYTHON AND NOT (Python3_FOUND AND pybind11_FOUND))
  message(FATAL_ERROR "PIPEWRIGHT_WITH_PYTHON=ON but pybind11 or the Python headers were not found (apt-get install pybind11-dev python3-dev)")
endif()
message(STATUS "pipewright: Python module ${PIPEWRIGHT_WITH_PYTHON} (${Python3_EXECUTABLE}, pybind11 ${pybind11_VERSION})")

# --- Tests and benchmarks ----------------------------------------------------------------
if(BUILD_TESTING OR NOT DEFINED BUILD_TESTING)
  find_package(GTest REQUIRED)
endif()
if(PIPEWRIGHT_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
