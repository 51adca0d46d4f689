# tests/emu/env.sh — sourced by the tests that run GPU code on the emulated
# device, after tests/lib.sh.  Builds, under $WORK:
#   lib/      the emulated libcudart.so.13, libcublas.so.13, libnvrtc.so.13,
#             and libnccl.so.2 where nccl.h is found (beside the CUDA
#             headers, or in /usr/include or /usr/local/include)
#   netclib/  libnetrt_cuda.a with its CUDA sources compiled by nvcc.py,
#             beside the real libnetrt.a: what netc links programs against
# and exports what makes netc build, and its programs run, for the
# emulated device: NETC_NVCC (nvcc.py), NETC_LIB_DIR, NETC_CUDA_LIBS (the
# emulated CUDA runtime, where a program links the real one statically),
# NETC_CFLAGS (the usual ones and an rpath to the emulated libraries),
# LD_LIBRARY_PATH (cuBLAS and NVRTC are dlopened), NETC_CACHE_DIR (a JIT cache
# of the test's own), NETC_CUDA=yes (the suite's default is no),
# NETC_EMU_LIBDIR and NETC_EMU_CUDA_INCLUDE (nvcc.py's), NETC_EMU_IMAGE_DIR
# (lib/images: nvcc.py's copies of the fatbins it makes, which the
# emulated cudart loads without writing a file), and NETRT_CPU_BF16=fp32:
# the cpu's bf16 products as fp32 multiply-adds, which sum in the order
# the emulated device's do (AVX512-BF16's pairs and AMX's tiles have
# orders of their own), so that a bf16 run can agree with the cpu's bit
# for bit on any machine; and NETRT_CPU_CONV=builtin for the same reason:
# the cpu's convolutions on its own kernels, which sum in the emulated
# device's order, not on oneDNN's (runtime/conv_dnnl.c), whose order is
# its own and changes with the machine's instruction set.
# Skips the test (77) without the CUDA toolkit's headers or off x86-64;
# fails it if the libraries do not build without a warning.
# Gives emu_nvcc ARGS...: the emulated nvcc.

[ "${NETC_HAVE_CUDA:-no}" = yes ] || skip "netc was configured without CUDA: no toolkit headers"
[ "$(uname -m)" = x86_64 ] || skip "the emulated device's fibers are written for x86-64"
EMU="$SRC/tests/emu"
EMU_LIB="$WORK/lib"
mkdir -p "$EMU_LIB" "$WORK/netclib"
cuda_inc=$(echo "${NETRT_CUDA_CFLAGS:-}" | sed -n 's/.*-I\([^ ]*\).*/\1/p')
[ -n "$cuda_inc" ] || cuda_inc=/usr/local/cuda/include
cuda_major=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\)[0-9][0-9][0-9]$/\1/p' \
    "$cuda_inc/cuda_runtime_api.h")
export NETC_EMU_LIBDIR="$EMU_LIB" NETC_EMU_CUDA_INCLUDE="$cuda_inc" NETRT_CPU_BF16=fp32 \
    NETRT_CPU_CONV=builtin
export NETC_EMU_IMAGE_DIR="$EMU_LIB/images"
# the objects nvcc.py has compiled, shared by the tests of one build tree
# (make clean removes them): the same kernel source, built by another test,
# is compiled once
export NETC_EMU_CACHE="${NETC_EMU_CACHE:-$BUILD/tests/emu-cache}"
export NETC_EMU_NVCC="$PYTHON $EMU/nvcc.py"
emu_nvcc() { "$PYTHON" "$EMU/nvcc.py" "$@"; }

# emu_lib NAME MAJOR SOURCES...: lib/libNAME.so.MAJOR and its libNAME.so link
emu_lib() {
    _name=$1
    _major=$2
    shift 2
    # shellcheck disable=SC2086
    ${CXX:-c++} -std=c++17 -O2 -march=native -ffp-contract=off -fPIC -shared -Wall -Wextra -Wno-attributes -I"$cuda_inc" \
        -I"$EMU" -DNETC_EMU_NVCC_PY="\"$EMU/nvcc.py\"" "$@" \
        -Wl,-soname,lib$_name.so.$_major -o "$EMU_LIB/lib$_name.so.$_major" \
        -L"$EMU_LIB" -ldl >> "$WORK/emu-build.log" 2>&1 &&
        ln -sf "lib$_name.so.$_major" "$EMU_LIB/lib$_name.so"
}
nccl_inc=
for d in "$cuda_inc" /usr/include /usr/local/include; do
    [ -f "$d/nccl.h" ] && { nccl_inc=$d; break; }
done
emu_lib cudart "$cuda_major" "$EMU/device.cc" "$EMU/cudart.cc" &&
    emu_lib cublas "$cuda_major" "$EMU/cublas.cc" -lcudart &&
    emu_lib nvrtc "$cuda_major" "$EMU/nvrtc.cc" &&
    if [ -n "$nccl_inc" ]; then
        emu_lib nccl "$(sed -n 's/^#define NCCL_MAJOR *\([0-9]*\)$/\1/p' "$nccl_inc/nccl.h")" \
            -I"$nccl_inc" "$EMU/nccl.cc" -lcudart -lpthread
    fi
check "[ $? -eq 0 ] && ! grep -q warning '$WORK/emu-build.log'" \
    "the emulated libraries do not build cleanly: $(head -20 "$WORK/emu-build.log")"
[ -f "$EMU_LIB/libnvrtc.so" ] || finish

# The runtime's CUDA library for the emulated device: its C sources as
# configure compiles them, its .cu sources through nvcc.py.
emu_rt_ok=1
for f in launch module jit libs; do
    ${CC:-cc} -std=c11 -O2 -c -I"$SRC/runtime" -I"$SRC/runtime/cuda" -I"$cuda_inc" \
        "$SRC/runtime/cuda/$f.c" -o "$WORK/netclib/$f.o" >> "$WORK/emu-build.log" 2>&1 ||
        emu_rt_ok=0
done
${CC:-cc} -c "$BUILD/runtime/cuda/kernels_text.c" -o "$WORK/netclib/kernels_text.o" \
    >> "$WORK/emu-build.log" 2>&1 || emu_rt_ok=0
for f in backend device; do
    emu_nvcc -std=c++17 -O2 -c -I"$SRC/runtime" -I"$SRC/runtime/cuda" \
        "$SRC/runtime/cuda/$f.cu" -o "$WORK/netclib/$f.o" >> "$WORK/emu-build.log" 2>&1 ||
        emu_rt_ok=0
done
[ $emu_rt_ok = 1 ] && ar rcs "$WORK/netclib/libnetrt_cuda.a" "$WORK"/netclib/*.o &&
    ln -s "$BUILD/runtime/libnetrt.a" "$WORK/netclib/libnetrt.a" || emu_rt_ok=0
# netc --mpi's, where netc was built with MPI
[ -e "$BUILD/runtime/libnetrt_mpi.a" ] && ln -s "$BUILD/runtime/libnetrt_mpi.a" "$WORK/netclib/"
check "[ $emu_rt_ok = 1 ]" \
    "the runtime does not build for the emulated device: $(grep -m10 -i error "$WORK/emu-build.log")"
[ $emu_rt_ok = 1 ] || finish

export NETC_NVCC="$NETC_EMU_NVCC" NETC_LIB_DIR="$WORK/netclib"
export NETC_CFLAGS="${NETC_CFLAGS:--O3 -fno-math-errno} -Wl,-rpath,$EMU_LIB"
export NETC_CUDA_LIBS="-L$EMU_LIB -lcudart -ldl -lstdc++"
export LD_LIBRARY_PATH="$EMU_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NETC_CACHE_DIR="$WORK/jit-cache" NETC_CUDA=yes
