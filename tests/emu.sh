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
    NETC_EMU_ORDER=$2 "$WORK/selftest" "$1" > "$WORK/self.out" 2>&1
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
self divergent shuffle
check "grep -q 'returned while 16 threads wait at the __syncthreads at .*selftest.cu:' '$WORK/self.out' && grep -q 'unspecified launch failure' '$WORK/self.out'" \
    "a barrier in divergent code is not reported: $(cat "$WORK/self.out")"
self hostread shuffle
check "[ $self_rc -ne 0 ] && grep -q 'the host touched device memory at .* (byte 12 of a 1024-byte cudaMalloc)' '$WORK/self.out'" \
    "a host read of device memory is not reported: $(cat "$WORK/self.out")"
self overflow shuffle
check "[ $self_rc -ne 0 ] && grep -q '0 bytes past the end of a 1024-byte device allocation' '$WORK/self.out'" \
    "a write past an allocation is not reported: $(cat "$WORK/self.out")"
self stale shuffle
check "grep -q '^before the wait: -1$' '$WORK/self.out' && grep -q '^after the wait: 32640$' '$WORK/self.out'" \
    "a pinned copy is not lazy: $(cat "$WORK/self.out")"
self capture shuffle
check "grep -q '^sync in capture: cudaErrorStreamCaptureUnsupported$' '$WORK/self.out' && grep -q '^end capture: cudaErrorStreamCaptureInvalidated$' '$WORK/self.out'" \
    "a synchronisation in a capture is not refused: $(cat "$WORK/self.out")"
self lda shuffle
check "grep -q '^sgemm: CUBLAS_STATUS_INVALID_VALUE$' '$WORK/self.out'" \
    "cublasSgemm takes lda < m: $(cat "$WORK/self.out")"
self hostptr shuffle
check "grep -q 'argument 1 is .*neither device memory nor pinned host memory' '$WORK/self.out' && grep -q '^launch: invalid argument$' '$WORK/self.out'" \
    "a host pointer given to a kernel is not refused: $(cat "$WORK/self.out")"
self bounds shuffle
check "grep -q 'more than its __launch_bounds__(256)' '$WORK/self.out' && grep -q '^launch: too many resources requested for launch$' '$WORK/self.out'" \
    "a launch beyond __launch_bounds__ is not refused: $(cat "$WORK/self.out")"

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
