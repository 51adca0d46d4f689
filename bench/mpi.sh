#!/bin/bash
# bench/mpi.sh — data parallelism over MPI on this machine's cores: each
# model trained by one process on 2 threads at batch 2B, and by 2 ranks
# (mpirun -np 2) on 1 thread each at batch B: the same steps, the same
# global batch.  Also 1 process on 1 thread at batch 2B, the unit.
# Reports samples/s (the program's whole training loop) and the time the
# ranks spent in collectives (the gradient's sum, the stop vote) per step;
# the median of REPEAT runs (default 3).
# usage: bench/mpi.sh   (NETC: the netc, default ./netc; configured with MPI)
set -u
NETC=${NETC:-./netc}
REPEAT=${REPEAT:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/netc-mpi.XXXXXX")
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_vader_single_copy_mechanism=none
cd "$root" || exit 1
# median LINES: the middle of REPEAT numbers
median() { sort -n | sed -n "$(((REPEAT + 1) / 2))p"; }
# speed CMD...: samples/s of the training loop ("trained ...: N samples/s");
# stdin closed, which mpirun would otherwise read (the models' list below)
speed() {
    for _ in $(seq "$REPEAT"); do
        "$@" < /dev/null 2>&1 | sed -n 's/^trained .*: \([0-9.]*\) samples\/s$/\1/p'
    done | median
}
# comm CMD...: rank 0's collectives, ms a step ("communication: X ms a step, ...")
comm() {
    for _ in $(seq "$REPEAT"); do
        "$@" < /dev/null 2>&1 | sed -n 's/^communication: \([0-9.]*\) ms a step.*/\1/p'
    done | median
}
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(mpirun --version | head -n 1)"
echo
echo "| model | batch (global) | epochs | 1 x 1 thread | 1 x 2 threads | 2 ranks x 1 thread | ranks / threads | collectives, ms a step |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
while read -r m b e; do
    "$NETC" --mpi --no-cuda "models/$m.net" -o "$out/$m" || exit 1
    one=$(speed "$out/$m" --device cpu --threads 1 --batch $((2 * b)) --epochs "$e")
    two=$(speed "$out/$m" --device cpu --threads 2 --batch $((2 * b)) --epochs "$e")
    dp=$(speed mpirun -np 2 "$out/$m" --device cpu --threads 1 --batch "$b" --epochs "$e")
    c=$(comm mpirun -np 2 "$out/$m" --device cpu --threads 1 --batch "$b" --epochs "$e")
    echo "| $m | $((2 * b)) | $e | $one | $two | $dp | $(awk -v a="$dp" -v b="$two" 'BEGIN { printf "%.2f", a / b }') | $c |"
done <<'EOF'
boston_mlp 16 200
digits_mlp 32 20
digits_cnn 16 5
EOF
