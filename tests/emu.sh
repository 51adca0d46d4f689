# tests/emu.sh — the GPU code on netc's emulated CUDA device (tests/emu/,
# see its README.md).  Builds the emulated libcudart and libcublas from
# source, then:
#  - selftest: the device catches the bug classes it is there for (a
#    missing barrier, a divergent barrier, a host read of device memory, a
#    write past an allocation, a result read before its stream is waited
#    for, a synchronisation inside a capture, a too-small lda, a host
#    pointer given to a kernel, a launch beyond __launch_bounds__);
#  - tests/gpu/test_cuda_kernels.cu, every runtime kernel against the cpu,
#    in a shuffled and in the reversed thread order.
# Skipped (77) without the CUDA toolkit's headers (netc configured without
# CUDA) or off x86-64 (the fibers' context switch).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

[ "${NETC_HAVE_CUDA:-no}" = yes ] || skip "netc was configured without CUDA: no toolkit headers"
[ "$(uname -m)" = x86_64 ] || skip "the emulated device's fibers are written for x86-64"
CXX=${CXX:-c++}
EMU="$SRC/tests/emu"
LIB="$WORK/lib"
mkdir -p "$LIB"
cuda_inc=$(echo "$NETRT_CUDA_CFLAGS" | sed -n 's/.*-I\([^ ]*\).*/\1/p')
[ -n "$cuda_inc" ] || cuda_inc=/usr/local/cuda/include
major=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\)[0-9][0-9][0-9]$/\1/p' "$cuda_inc/cuda_runtime_api.h")
export NETC_EMU_LIBDIR="$LIB" NETC_EMU_CUDA_INCLUDE="$cuda_inc"

cxxflags="-std=c++17 -O2 -fPIC -shared -Wall -Wextra -Wno-attributes -I$cuda_inc -I$EMU"
# shellcheck disable=SC2086
$CXX $cxxflags "$EMU/device.cc" "$EMU/cudart.cc" -Wl,-soname,libcudart.so.$major \
    -o "$LIB/libcudart.so.$major" -ldl > "$WORK/build.log" 2>&1 &&
    ln -s "libcudart.so.$major" "$LIB/libcudart.so" &&
    $CXX $cxxflags "$EMU/cublas.cc" -Wl,-soname,libcublas.so.$major \
        -o "$LIB/libcublas.so.$major" -L"$LIB" -lcudart >> "$WORK/build.log" 2>&1 &&
    ln -s "libcublas.so.$major" "$LIB/libcublas.so"
check "[ $? -eq 0 ] && ! grep -q warning '$WORK/build.log'" \
    "the emulated libraries do not build cleanly: $(head -20 "$WORK/build.log")"
[ -f "$LIB/libcublas.so" ] || finish

nvcc() { "$PYTHON" "$EMU/nvcc.py" "$@"; }

# ---------------------------------------------------------------- selftest
nvcc -O2 "$EMU/selftest.cu" -o "$WORK/selftest" > "$WORK/self.log" 2>&1
check "[ $? -eq 0 ]" "selftest.cu does not build: $(head -20 "$WORK/self.log")"
self() { # mode, order: the output and the status in $WORK/self.out, $self_rc
    (NETC_EMU_ORDER=$2 exec "$WORK/selftest" "$1") > "$WORK/self.out" 2>&1
    self_rc=$?
}
for order in shuffle forward reverse; do
    self ok $order
    check "[ $self_rc -eq 0 ] && grep -q '^sum 32640 lanes ' '$WORK/self.out'" \
        "ok, $order order: $(cat "$WORK/self.out")"
done
races=0
for order in shuffle forward reverse; do
    self race $order
    [ $self_rc -ne 0 ] && races=$((races + 1))
done
check "[ $races -ge 1 ]" "a reduction without its barrier gave the right sum in every order"
# expect MODE PATTERN... WHAT: every pattern (grep -e) is in MODE's output
expect() {
    _mode=$1
    shift
    self "$_mode" shuffle
    _ok=1
    while [ $# -gt 1 ]; do
        grep -q -e "$1" "$WORK/self.out" || _ok=0
        shift
    done
    check "[ $_ok = 1 ]" "$1 is not caught: $(cat "$WORK/self.out")"
}
expect divergent 'returned while 16 threads wait at the __syncthreads at .*selftest.cu:' \
    'unspecified launch failure' "a barrier in divergent code"
expect hostread 'the host touched device memory at .* (byte 12 of a 1024-byte cudaMalloc)' \
    "a host read of device memory"
expect overflow '0 bytes past the end of a 1024-byte device allocation' 'in kernel fill, block' \
    "a write past an allocation"
expect stale '^before the wait: -1$' '^after the wait: 32640$' "a pinned result read before the wait"
expect capture '^sync in capture: cudaErrorStreamCaptureUnsupported$' \
    '^end capture: cudaErrorStreamCaptureInvalidated$' "a synchronisation in a capture"
expect lda '^sgemm: CUBLAS_STATUS_INVALID_VALUE$' "cublasSgemm with lda < m"
expect hostptr 'argument 1 is .*neither device memory nor pinned host memory' \
    '^launch: invalid argument$' "a host pointer given to a kernel"
expect bounds 'more than its __launch_bounds__(256)' \
    '^launch: too many resources requested for launch$' "a launch beyond __launch_bounds__"

# ------------------------------------------------------ the runtime kernels
# The runtime's C sources and its CUDA one (device.cu) built for the
# emulated device, and test_cuda_kernels.cu as tests/gpu/run.sh builds it.
ok=1
for f in launch module jit; do
    ${CC:-cc} -std=c11 -O2 -c -I"$SRC/runtime" -I"$SRC/runtime/cuda" -I"$cuda_inc" \
        "$SRC/runtime/cuda/$f.c" -o "$WORK/$f.o" >> "$WORK/rt.log" 2>&1 || ok=0
done
${CC:-cc} -c "$BUILD/runtime/cuda/kernels_text.c" -o "$WORK/kernels_text.o" >> "$WORK/rt.log" 2>&1 || ok=0
[ $ok = 1 ] && nvcc -std=c++17 -O2 -I"$SRC/runtime" -I"$SRC/runtime/cuda" \
    "$SRC/tests/gpu/test_cuda_kernels.cu" "$SRC/runtime/cuda/device.cu" \
    "$WORK/launch.o" "$WORK/module.o" "$WORK/jit.o" "$WORK/kernels_text.o" \
    "$BUILD/runtime/libnetrt.a" -lgomp -lm -o "$WORK/test_cuda_kernels" >> "$WORK/rt.log" 2>&1 || ok=0
check "[ $ok = 1 ]" "test_cuda_kernels does not build for the emulated device: $(grep -m10 -i error "$WORK/rt.log")"
if [ $ok = 1 ]; then
    for order in shuffle reverse; do
        NETC_EMU_ORDER=$order "$WORK/test_cuda_kernels" > "$WORK/tck.$order" 2>&1
        check "[ $? -eq 0 ] && grep -q 'test_cuda_kernels: [0-9]* checks, 0 failed' '$WORK/tck.$order'" \
            "test_cuda_kernels, $order order: $(grep -v '^ok' "$WORK/tck.$order" | tail -20)"
        tail -1 "$WORK/tck.$order"
    done
fi
finish
