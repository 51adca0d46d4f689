# tests/emu_nccl.sh — the emulated NCCL (tests/emu/nccl.cc; see
# tests/emu/README.md) between processes.  tests/emu/nccl_test.cu, built
# with the emulated nvcc, forks 1 to 3 ranks, each a process with an
# emulated GPU of its own:
#  - ok: all-reduces (floats in place, bit for bit the sum in rank order;
#    doubles out of place) on a non-blocking stream, one captured in a CUDA
#    graph after a kernel and replayed twice, a broadcast, and the calls
#    refused when made; the id's shared segment is gone after;
#  - a rank that never calls the collective (late), exits after joining
#    (exit), calls another one (mismatch) or never joins (init): the others
#    fail, the rank named, within NETC_EMU_NCCL_TIMEOUT, and none hangs;
#    two processes given the same rank (rank), or different numbers of
#    ranks (size): every rank fails (at once, or a rank that comes after
#    the others gave up, within the timeout);
#  - a segment of the same id that a crashed rank left is replaced (stale).
# Skipped (77) where tests/emu.sh is, and without nccl.h.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

. "$SRC/tests/emu/env.sh"
[ -f "$EMU_LIB/libnccl.so" ] ||
    skip "no nccl.h beside the CUDA headers, in /usr/include or in /usr/local/include"

emu_nvcc -O2 "$EMU/nccl_test.cu" -lnccl -o "$WORK/nccl_test" > "$WORK/build.log" 2>&1
check "[ $? -eq 0 ]" "nccl_test.cu does not build: $(head -20 "$WORK/build.log")"
[ -x "$WORK/nccl_test" ] || finish

# run MODE NRANKS TIMEOUT: nccl_test's output in $out, its status in $rc
run() {
    out="$WORK/$1.$2"
    NETC_EMU_NCCL_TIMEOUT=$3 timeout 120 "$WORK/nccl_test" "$1" "$2" > "$out" 2>&1
    rc=$?
}
# has PATTERN...: every pattern (grep -e) is in $out
has() {
    for _p in "$@"; do
        grep -q -e "$_p" "$out" || return 1
    done
}
# within SECONDS: the ranks took less
within() { awk -v s="$1" '/^time / { t = $2 } END { exit !(t != "" && t + 0 < s + 0) }' "$out"; }
# oks N: N ranks said ok
oks() { [ "$(grep -c '^rank [0-9]: ok$' "$out")" -eq "$1" ]; }

for n in 3 2 1; do
    run ok $n 30
    check "[ $rc -eq 0 ] && oks $n && has '^segment: removed$'" \
        "ok, $n ranks (status $rc): $(grep -v ' 0 of ' "$out" | head -20)"
done

run late 3 2
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' 'rank 2: exit 0' \
    'on rank [01] of 3: .*rank 2 never came in 2 s (NETC_EMU_NCCL_TIMEOUT' \
    '^rank [01]: sync: unspecified launch failure; async error: remote process' \
    '^segment: removed$' && within 10" \
    "a rank that never calls the collective: $(head -20 "$out")"

run exit 3 30
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' 'rank 2: exit 0' \
    'on rank [01] of 3: .*rank 2 (pid [0-9]*) exited' '^segment: removed$' && within 10" \
    "a rank that exits after joining: $(head -20 "$out")"

run mismatch 3 30
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' 'rank 2: exit 1' \
    'on rank [01] of 3: .*rank 2 calls ncclAllReduce of 999 ncclFloat32 (ncclSum) as its collective' \
    'on rank 2 of 3: .*rank [01] calls ncclAllReduce of 1000 ' '^segment: removed$' && within 10" \
    "ranks that call different collectives: $(head -20 "$out")"

run init 3 2
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' \
    'ncclCommInitRank (rank [01] of 3): .*rank 2 never came in 2 s (NETC_EMU_NCCL_TIMEOUT)' \
    '^segment: removed$' && within 10" \
    "a rank that never joins: $(head -20 "$out")"

run rank 3 2
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' 'rank 2: exit 1' \
    'rank 0 has joined already, as pid [0-9]*: two processes were given the same rank' \
    '^segment: removed$' && within 10" \
    "two processes as rank 0: $(head -20 "$out")"

run size 3 2
check "[ $rc -eq 1 ] && has 'rank 0: exit 1' 'rank 1: exit 1' 'rank 2: exit 1' \
    'this rank was told [34] ranks, the first to come (pid [0-9]*) [34] ranks' \
    '^segment: removed$' && within 10" \
    "ranks told different numbers of ranks: $(head -20 "$out")"

run stale 2 30
check "[ $rc -eq 0 ] && oks 2 && has '^stale segment: there$' \
    'netc-emu-nccl-[0-9a-f]* is stale (its rank 0, pid [0-9]*, died without leaving): removed' \
    '^segment: removed$'" \
    "a stale segment of the same id: $(grep -v ' 0 of ' "$out" | head -20)"
finish
