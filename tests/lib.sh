# tests/lib.sh — sourced by every shell test.
#
# Gives: $NETC (the compiler under test), $SRC (the source tree), $WORK (a
# fresh scratch directory for this test, removed on exit), and helpers:
#   compile MODEL PROG      netc MODEL -o PROG, failing the test on error
#   check COND MESSAGE      count a failed check (the test goes on)
#   finish                  exit 0 if every check passed, 1 otherwise
#   skip REASON             exit 77 (Automake's "skipped")
#   stop PID SIG            signal a background job, wait (bounded) for it
#   await PID               wait (bounded) for a background job
#   $default_signals CMD... run CMD with SIGINT and SIGTERM not ignored
#   losses A B              two --metrics files' steps: the count, the largest
#                           relative difference of their losses
#   field FILE KEY          KEY's value in the last --metrics record that has it
#   below X TOL, close A B TOL   X <= TOL; |A - B| <= TOL |A|
# Run by hand from the build tree: NETC=./netc NETC_TOP_SRCDIR=. sh tests/x.sh
set -u
SRC=${NETC_TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
NETC=${NETC:-$SRC/netc}
BUILD=${NETC_TOP_BUILDDIR:-$(dirname "$NETC")}
PYTHON=${PYTHON:-python3}
test_name=$(basename "$0" .sh)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/netc-$test_name.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0
checks=0

compile() {
    if ! "$NETC" "$1" -o "$2"; then
        echo "FAIL: netc $1 -o $2" >&2
        failures=$((failures + 1))
        return 1
    fi
}

check() {
    checks=$((checks + 1))
    if ! eval "$1"; then
        echo "FAIL: $2" >&2
        failures=$((failures + 1))
    fi
}

# stop PID SIG: sends SIG to PID, a background job of this shell, and
# waits for it to end, at most 30 s (then it is killed: a test never
# hangs on a program that does not stop); returns its exit status.
stop() {
    kill -"$2" "$1" 2> /dev/null
    await "$1"
}

# await PID: waits for PID, a background job of this shell, to end, at
# most 30 s (then it is killed); returns its exit status.
await() {
    _i=0
    while kill -0 "$1" 2> /dev/null && [ $_i -lt 300 ]; do sleep 0.1; _i=$((_i + 1)); done
    kill -KILL "$1" 2> /dev/null
    wait "$1"
}

# A background job of a script starts with SIGINT ignored (POSIX), and so
# does everything under nohup; a program keeps a signal it was started
# with ignored.  $default_signals CMD... runs CMD with SIGINT and SIGTERM
# back to their defaults (coreutils' env, 8.31 or later, which then execs
# CMD: a background job's $! is CMD's pid); empty where env cannot.
default_signals=
env --default-signal=INT true 2> /dev/null && default_signals="env --default-signal=INT,TERM"

# same_prediction A B: two rows of --predict's output agree.  Bit for bit
# on the cpu ($DEV unset or cpu); on a GPU, where cuBLAS computes a batch
# of 2 and one of 64 with different kernels, each number within 1e-6 (so
# the class exactly) and every other field exactly.
same_prediction() {
    [ "${DEV:-cpu}" = cpu ] && { [ "$1" = "$2" ]; return; }
    printf '%s\n%s\n' "$1" "$2" | awk -F, 'NR == 1 { n = split($0, a) } NR == 2 {
        if (NF != n) exit 1
        for (i = 1; i <= NF; i++)
            if ($i == $i + 0 && a[i] == a[i] + 0) { if ($i - a[i] > 1e-6 || a[i] - $i > 1e-6) exit 1 }
            else if ($i != a[i]) exit 1 }'
}

# losses A B: the number of steps of two --metrics files and the largest
# relative difference of their losses ("N D"), or what does not match
losses() {
    awk 'FNR == 1 { f++ }
        /"step"/ { match($0, /"loss": [^,}]*/); v = substr($0, RSTART + 8, RLENGTH - 8)
                   match($0, /"step": [0-9]*/); s = substr($0, RSTART + 8, RLENGTH - 8)
                   if (f == 1) a[s] = v; else b[s] = v }
        END { m = 0; n = 0
              for (s in a) { if (!(s in b)) { print "step " s " missing"; exit }
                             d = a[s] - b[s]; if (d < 0) d = -d
                             r = d / (a[s] < 0 ? -a[s] : a[s]); if (r > m) m = r; n++ }
              for (s in b) if (!(s in a)) { print "step " s " extra"; exit }
              print n, m }' "$1" "$2"
}
# field FILE KEY: KEY's value in the last record that has it
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1" | tail -n 1; }
# below X TOL: X <= TOL
below() { awk -v x="$1" -v t="$2" 'BEGIN { exit !(x != "" && x + 0 <= t + 0) }'; }
# close A B TOL: |A - B| <= TOL |A|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (a < 0) a = -a; exit !(a != "" && d <= t * a) }'; }

# mpi_setup SECONDS: skips (77) without MPI or mpirun; else OpenMPI set up
# for tests (CI runs as root; two ranks on however many cores; no
# cross-memory attach, which containers often forbid) and `run NP ARGS...',
# an mpirun bounded by SECONDS.
mpi_setup() {
    [ "${NETC_HAVE_MPI:-no}" = yes ] || skip "netc was configured without MPI (configure --with-mpi)"
    command -v mpirun > /dev/null || skip "no mpirun on the PATH (Debian: openmpi-bin)"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    mpi_timeout=$1
    run() { # NP ARGS...
        _np=$1
        shift
        timeout -k 5 "$mpi_timeout" mpirun -np "$_np" "$@"
    }
}

# two_ranks NAME PROG DEV STEPS [ARGS...]: PROG on 2 ranks at batch 16
# (the test's own `run NP ARGS...', a bounded mpirun; ARGS theirs) against
# one process at 32, STEPS steps on DEV: exit 0, the step losses and the
# test loss within 1e-6 (or $two_ranks_tol).  Leaves $WORK/NAME.one and NAME.two (--metrics)
# and NAME.out (the ranks').
two_ranks() {
    _n=$1 _p=$2 _dev=$3 _steps=$4
    shift 4
    "$_p" --device "$_dev" --batch 32 --max-steps "$_steps" --metrics "$WORK/$_n.one" \
        --log-every 1 --quiet
    run 2 "$_p" --device "$_dev" --batch 16 --max-steps "$_steps" --metrics "$WORK/$_n.two" \
        --log-every 1 "$@" > "$WORK/$_n.out" 2>&1
    _rc=$?
    set -- "$_n" "$_p" "$_dev" "$_steps"
    check "[ $_rc -eq 0 ]" "$1 on 2 ranks ($3): $(grep -v '^ *$' "$WORK/$1.out" | head -5)"
    _d=$(losses "$WORK/$1.one" "$WORK/$1.two")
    echo "$1: 2 ranks x 16 against 1 x 32 on $3: steps, largest relative difference: $_d"
    check "[ '${_d%% *}' = $4 ] && below '${_d#* }' ${two_ranks_tol:-1e-6}" "$1: step losses differ: $_d"
    check "close '$(field "$WORK/$1.one" test_loss)' '$(field "$WORK/$1.two" test_loss)' ${two_ranks_tol:-1e-6}" \
        "$1: the test loss on 2 ranks differs from one process's"
}

# last_of_one PROG DEV EPOCHS: boston's 405 samples on 2 ranks at 202 (405
# = 2 x 202 + 1: each epoch's last batch is one sample, and rank 0 has none)
# against one process at 404, EPOCHS epochs on DEV: exit 0, the step losses
# within 1e-6.
last_of_one() {
    "$1" --device "$2" --batch 404 --epochs "$3" --metrics "$WORK/last.one" --log-every 1 --quiet
    run 2 "$1" --device "$2" --batch 202 --epochs "$3" --metrics "$WORK/last.two" --log-every 1 \
        --quiet > "$WORK/last.out" 2>&1
    check "[ $? -eq 0 ]" "a last batch of one sample on 2 ranks ($2): $(head -3 "$WORK/last.out")"
    _d=$(losses "$WORK/last.one" "$WORK/last.two")
    check "[ '${_d%% *}' = $(($3 * 2)) ] && below '${_d#* }' 1e-6" "a last batch of one sample: $_d"
}

finish() {
    echo "$test_name: $checks checks, $failures failed"
    [ "$failures" -eq 0 ]
    exit $?
}

skip() {
    echo "SKIP: $*"
    exit 77
}
