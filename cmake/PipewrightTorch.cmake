# libtorch for exec/: which one, from where, and a check that it is one installation.
#
# Two sources (docs/gpu.md, "Which libtorch"):
#   default                          Debian's libtorch-dev 1.13 through find_package(Torch)
#   -DPIPEWRIGHT_TORCH_PYTHON=PY     the libtorch inside the `torch` package that the Python
#                                    interpreter PY imports (a pip wheel, e.g. the venv that
#                                    `tools/install-deps --torch pip` makes). Every path --
#                                    headers, libtorch, c10, the CUDA libraries, the C++ ABI flag
#                                    and the C++ standard -- comes from that one package; nothing
#                                    is looked up under /usr, so a machine that also has
#                                    libtorch-dev cannot mix the two.
# Either way the result is the interface target `pw_torch` (link it to use torch), Torch_FOUND,
# and PW_TORCH_VERSION / PW_TORCH_PREFIX / PW_TORCH_CUDA / PW_TORCH_CXX_STANDARD. Configure stops
# when the headers, libtorch, c10 and Caffe2 come from different prefixes.
set(PIPEWRIGHT_TORCH_PYTHON "" CACHE FILEPATH
    "Python whose `torch` package provides libtorch (default: Debian's libtorch-dev)")

# The installation prefix a torch path belongs to: <p>/include..., <p>/lib[/<multiarch>]/...,
# <p>/share/cmake/..., <p>/lib[/<multiarch>]/cmake/...
function(_pw_torch_prefix out kind path)
  if(kind STREQUAL "include")
    string(REGEX REPLACE "/include/?$" "" p "${path}")
  elseif(kind STREQUAL "library")
    get_filename_component(p "${path}" DIRECTORY)
    string(REGEX REPLACE "/lib(64)?(/[a-z0-9_]+-linux-gnu)?$" "" p "${p}")
  else()  # a CMake package directory
    string(REGEX REPLACE "/(share|lib(64)?(/[a-z0-9_]+-linux-gnu)?)/cmake/[A-Za-z0-9_]+/?$" "" p "${path}")
  endif()
  get_filename_component(p "${p}" REALPATH)
  set(${out} "${p}" PARENT_SCOPE)
endfunction()

set(Torch_FOUND FALSE)
if(PIPEWRIGHT_TORCH_PYTHON)
  execute_process(
    COMMAND "${PIPEWRIGHT_TORCH_PYTHON}" -c
      "import os, torch; print(torch.__version__.split('+')[0]); print(os.path.dirname(torch.__file__)); print(torch.version.cuda or ''); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
    RESULT_VARIABLE _pw_rc OUTPUT_VARIABLE _pw_out ERROR_VARIABLE _pw_err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REPLACE "\n" ";" _pw_lines "${_pw_out}")
  list(LENGTH _pw_lines _pw_n)
  if(_pw_rc EQUAL 0 AND NOT _pw_n EQUAL 4)
    set(_pw_rc 1)
    set(_pw_err "it did not report a torch")
  endif()
  if(NOT _pw_rc EQUAL 0)
    string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" _pw_err "${_pw_err}")
    message(FATAL_ERROR "PIPEWRIGHT_TORCH_PYTHON=${PIPEWRIGHT_TORCH_PYTHON}: cannot import torch "
                        "(${_pw_err}); tools/install-deps --torch pip makes a venv that can")
  endif()
  list(GET _pw_lines 0 PW_TORCH_VERSION)
  list(GET _pw_lines 1 _pw_dir)
  list(GET _pw_lines 2 PW_TORCH_CUDA)
  list(GET _pw_lines 3 _pw_abi)
  get_filename_component(PW_TORCH_PREFIX "${_pw_dir}" REALPATH)
  set(_pw_libs)
  set(_pw_names torch torch_cpu c10)
  if(PW_TORCH_CUDA)
    list(APPEND _pw_names torch_cuda c10_cuda)
  endif()
  foreach(_n IN LISTS _pw_names)
    unset(_pw_lib)
    find_library(_pw_lib ${_n} PATHS "${PW_TORCH_PREFIX}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(NOT _pw_lib)
      message(FATAL_ERROR "PIPEWRIGHT_TORCH_PYTHON: ${PW_TORCH_PREFIX}/lib has no lib${_n}.so "
                          "(is this torch a full wheel?)")
    endif()
    list(APPEND _pw_libs "${_pw_lib}")
  endforeach()
  set(_pw_incs "${PW_TORCH_PREFIX}/include" "${PW_TORCH_PREFIX}/include/torch/csrc/api/include")
  if(NOT EXISTS "${PW_TORCH_PREFIX}/include/torch/torch.h" AND
     NOT EXISTS "${PW_TORCH_PREFIX}/include/torch/csrc/api/include/torch/torch.h")
    message(FATAL_ERROR "PIPEWRIGHT_TORCH_PYTHON: ${PW_TORCH_PREFIX}/include has no torch headers")
  endif()
  add_library(pw_torch INTERFACE IMPORTED GLOBAL)
  # Imported include directories are system headers: a newer torch's warnings never fail us.
  # --no-as-needed keeps libtorch_cuda loaded (it registers the CUDA kernels) although no
  # symbol of it is referenced directly.
  set_target_properties(pw_torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_pw_incs}"
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_pw_abi}"
    INTERFACE_LINK_LIBRARIES "-Wl,--no-as-needed;${_pw_libs};-Wl,--as-needed")
  # A CUDA wheel brings its NCCL and CUDA runtime as pip packages beside torch (nvidia/...),
  # found at run time through libtorch_cuda's RPATH. The NCCL backend links those same files, so
  # one NCCL and one cudart are in the process whichever library is loaded first.
  get_filename_component(_pw_site "${PW_TORCH_PREFIX}" DIRECTORY)
  if(PW_TORCH_CUDA AND EXISTS "${_pw_site}/nvidia/nccl/include/nccl.h")
    file(GLOB _pw_wheel_nccl "${_pw_site}/nvidia/nccl/lib/libnccl.so*")
    file(GLOB _pw_wheel_cudart "${_pw_site}/nvidia/*/lib/libcudart.so.[0-9]*")
    if(_pw_wheel_nccl AND _pw_wheel_cudart)
      list(GET _pw_wheel_nccl 0 _pw_wheel_nccl)
      list(GET _pw_wheel_cudart 0 _pw_wheel_cudart)
      set(PW_NCCL_INCLUDE_DIR "${_pw_site}/nvidia/nccl/include" CACHE PATH "nccl.h's directory")
      set(PW_NCCL_LIBRARY "${_pw_wheel_nccl}" CACHE FILEPATH "libnccl")
      set(PW_CUDART_LIBRARY "${_pw_wheel_cudart}" CACHE FILEPATH "libcudart (default: the toolkit's)")
    endif()
  endif()
  set(_pw_check_include "${PW_TORCH_PREFIX}/include")
  list(GET _pw_libs 0 _pw_check_torch)
  list(GET _pw_libs 2 _pw_check_c10)
  set(_pw_check_caffe2 "${PW_TORCH_PREFIX}/share/cmake/Caffe2")
  set(Torch_FOUND TRUE)
else()
  find_package(Torch QUIET)
  if(Torch_FOUND)
    list(GET TORCH_INCLUDE_DIRS 0 _pw_check_include)
    set(_pw_check_torch "${TORCH_LIBRARY}")
    set(_pw_check_c10 "${c10_LIBRARY}")
    set(_pw_check_caffe2 "${Caffe2_DIR}")
    _pw_torch_prefix(PW_TORCH_PREFIX include "${_pw_check_include}")
    add_library(pw_torch INTERFACE IMPORTED GLOBAL)
    set_target_properties(pw_torch PROPERTIES INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}")
    set(PW_TORCH_CUDA "")
    if(TARGET torch_cuda OR TARGET c10_cuda)
      set(PW_TORCH_CUDA "yes")
    endif()
    set(PW_TORCH_VERSION "")
  endif()
endif()

if(Torch_FOUND)
  # One installation: headers, libtorch, c10 and Caffe2's CMake files share one prefix.
  _pw_torch_prefix(_pw_p_inc include "${_pw_check_include}")
  _pw_torch_prefix(_pw_p_torch library "${_pw_check_torch}")
  _pw_torch_prefix(_pw_p_c10 library "${_pw_check_c10}")
  _pw_torch_prefix(_pw_p_caffe2 package "${_pw_check_caffe2}")
  if(NOT (_pw_p_inc STREQUAL _pw_p_torch AND _pw_p_inc STREQUAL _pw_p_c10 AND
          _pw_p_inc STREQUAL _pw_p_caffe2))
    message(FATAL_ERROR
      "libtorch is mixed from different installations:\n"
      "  headers  ${_pw_check_include}\n  libtorch ${_pw_check_torch}\n"
      "  c10      ${_pw_check_c10}\n  Caffe2   ${_pw_check_caffe2}\n"
      "Choose one: Debian's libtorch-dev (no Torch_DIR), or a pip torch with "
      "-DPIPEWRIGHT_TORCH_PYTHON=<venv>/bin/python (docs/gpu.md); clear Torch_DIR, Caffe2_DIR "
      "and CMAKE_PREFIX_PATH in a fresh build directory.")
  endif()
  # Version and the C++ standard its headers need (torch 2.x's ATen requires C++20).
  # torch/version.h in 1.13; 2.x keeps the numbers in torch/headeronly/version.h.
  set(_pw_vh "${PW_TORCH_PREFIX}/include/torch/headeronly/version.h")
  if(NOT EXISTS "${_pw_vh}")
    set(_pw_vh "${PW_TORCH_PREFIX}/include/torch/csrc/api/include/torch/version.h")
  endif()
  if(EXISTS "${_pw_vh}")
    file(STRINGS "${_pw_vh}" _pw_v REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
           _pw_hv "${_pw_v}")
    if(NOT PW_TORCH_VERSION)
      set(PW_TORCH_VERSION "${_pw_hv}")
    elseif(NOT PW_TORCH_VERSION VERSION_EQUAL _pw_hv)
      message(FATAL_ERROR "PIPEWRIGHT_TORCH_PYTHON: python says torch ${PW_TORCH_VERSION}, its "
                          "headers say ${_pw_hv}")
    endif()
  endif()
  set(PW_TORCH_CXX_STANDARD 17)
  file(STRINGS "${PW_TORCH_PREFIX}/include/ATen/ATen.h" _pw_cxx20 REGEX "C\\+\\+20 or later")
  if(_pw_cxx20)
    set(PW_TORCH_CXX_STANDARD 20)
  endif()
  set_property(TARGET pw_torch APPEND PROPERTY INTERFACE_COMPILE_FEATURES cxx_std_${PW_TORCH_CXX_STANDARD})
  if(PW_TORCH_CUDA)
    set(_pw_cuda_word "CUDA ${PW_TORCH_CUDA} build")
  else()
    set(_pw_cuda_word "CPU-only build")
  endif()
  message(STATUS "pipewright: libtorch ${PW_TORCH_VERSION} at ${PW_TORCH_PREFIX} (${_pw_cuda_word}, C++${PW_TORCH_CXX_STANDARD})")
endif()
