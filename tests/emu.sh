# tests/emu.sh — the GPU code on netc's emulated CUDA device (tests/emu/,
# see its README.md).  Builds the emulated libraries and runtime
# (tests/emu/env.sh), then:
#  - selftest: the device catches the bug classes it is there for (a
#    missing barrier, a divergent barrier, a host read of device memory, a
#    write past an allocation, a result read before its stream is waited
#    for, a synchronisation inside a capture, a too-small lda, a host
#    pointer given to a kernel, a launch beyond __launch_bounds__, a
#    kernel with more than 48 KiB of static shared data);
#  - tests/gpu/test_cuda_kernels.cu, every runtime kernel against the cpu,
#    in a shuffled and in the reversed thread order.
# Skipped (77) without the CUDA toolkit's headers (netc configured without
# CUDA) or off x86-64 (the fibers' context switch).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

. "$SRC/tests/emu/env.sh"
nvcc() { emu_nvcc "$@"; }

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
expect unset '^unset nan$' "a template's shared array not filled with NaN"
expect shared '^shared 765 762$' "a kernel with 48 KiB of static shared data (it must run)"
for order in shuffle forward reverse; do
    self branches $order
    check "[ $self_rc -eq 0 ] && grep -q '^replays right: 20 of 20$' '$WORK/self.out' &&
           grep -q '^waited: 1275$' '$WORK/self.out'" \
        "a graph of two streams, $order order, or a wait for another stream's event: $(cat "$WORK/self.out")"
done
expect early '^replays right: [0-9] of 20$\|^replays right: 1[0-9] of 20$' \
    "a graph that reads a branch's result before the join"
expect unjoined '^end capture: cudaErrorStreamCaptureUnjoined$' 'was not joined back' \
    "a capture that ends with a branch not joined"
self halfs shuffle
check "[ $self_rc -eq 0 ] && grep -q '^halfs: 0 wrong; 2 1.0078125 2.03125 inf 0 6.25$' '$WORK/self.out'" \
    "bf16 and fp16 in a kernel: $(cat "$WORK/self.out")"
# ptxas' limit: the same kernel with 49 KiB, which nvcc.py must refuse,
# naming the kernel and its three arrays
nvcc -O2 -DSHARED_KIB=49 "$EMU/selftest.cu" -o "$WORK/selftest49" > "$WORK/self49.log" 2>&1
rc=$?
refused=0
[ $rc -ne 0 ] && [ ! -e "$WORK/selftest49" ] &&
    grep -qF "selftest.cu: error: entry function 'big_shared(float const*, float*)' uses too much shared data (0xc400 bytes, 0xc000 max)" "$WORK/self49.log" &&
    grep -qF "staged<8192>(float const*)::t (32768 bytes), big_shared(float const*, float*)::own (13312 bytes), staged_far(float const*)::u (4096 bytes)" "$WORK/self49.log" &&
    refused=1
check "[ $refused = 1 ]" \
    "49 KiB of static shared data is not refused as ptxas refuses it (status $rc): $(cat "$WORK/self49.log")"

# ------------------------------------------------------ the runtime kernels
# The runtime as env.sh built it for the emulated device, and
# test_cuda_kernels.cu as tests/gpu/run.sh builds it.
nvcc -std=c++17 -O2 -I"$SRC/runtime" -I"$SRC/runtime/cuda" -I"$SRC/templates" \
    "$SRC/tests/gpu/test_cuda_kernels.cu" "$NETC_LIB_DIR/libnetrt_cuda.a" \
    "$NETC_LIB_DIR/libnetrt.a" -lgomp -lm -o "$WORK/test_cuda_kernels" > "$WORK/rt.log" 2>&1
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
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
