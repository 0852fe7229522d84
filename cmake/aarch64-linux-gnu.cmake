# Cross build for AArch64 Linux on an x86-64 Debian host (make test-arm):
#   cmake -S . -B build-aarch64-cli -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# Needs gcc-aarch64-linux-gnu and the arm64 -dev packages of the libraries
# (Debian multiarch: libpcre2-dev:arm64 ...; scripts/install-deps.sh installs
# them). The result runs under qemu-aarch64 -L /usr/aarch64-linux-gnu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)

# Libraries and headers from the arm64 multiarch paths only; programs
# (pkg-config itself) from the host.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The host's pkg-config reads the arm64 .pc files and never the host's own:
# a library missing for arm64 is then not found, rather than the x86-64 one
# being linked.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
