# Installation layout and linkage, included before the modules' add_library calls
# (docs/library.md). The libraries are shared by default: their third-party dependencies
# (Boost.Graph, nlohmann_json, Graphviz; libtorch, Gloo, MPI in pw_exec) stay private to the .so
# files, so a project that uses the installed package needs nothing but a C++17 compiler (and
# the runtime libraries the .so files load). -DBUILD_SHARED_LIBS=OFF builds static libraries;
# the installed package then needs those dependencies' development files (pipewrightConfig.cmake
# finds them).
include(GNUInstallDirs)
option(BUILD_SHARED_LIBS "Build pw_graph, pw_sched, pw_sim (and pw_exec) as shared libraries" ON)

# Installed programs and libraries find pipewright's libraries relative to themselves, so the
# prefix can be moved; non-system directories of other dependencies (e.g. a libtorch outside
# the system paths) are added as absolute paths.
file(RELATIVE_PATH _pw_bin_to_lib /pw/${CMAKE_INSTALL_BINDIR} /pw/${CMAKE_INSTALL_LIBDIR})
set(CMAKE_INSTALL_RPATH "$ORIGIN/${_pw_bin_to_lib}")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

# The Python package (tools/python) goes here, relative to the prefix: Debian's layout for
# Python 3 modules; a user adds <prefix>/lib/python3/dist-packages to PYTHONPATH.
set(PIPEWRIGHT_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where `cmake --install` puts the pipewright Python package, relative to the prefix")
