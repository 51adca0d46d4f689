# tests/mpi_slurm.sh — data-parallel training started by Slurm's srun (netc
# --mpi), on a private one-node Slurm cluster made on this machine: munged
# with a key of its own, slurmctld and slurmd in the foreground (-D), in the
# background, with their configuration, state, spool, sockets and logs in
# the test's scratch directory, on TCP ports nothing else listens on. The
# node is this machine under its short hostname, at 127.0.0.1, with nproc
# CPUs, its partition oversubscribed (2 tasks on any number of cores); no
# cgroups (proctrack/linuxproc, task/none), no accounting. Checks:
#  - srun -n 2 starts 2 tasks on the node;
#  - srun -n 2 --mpi=pmix (OpenMPI 4 takes its world from PMIx: Debian's
#    has no PMI-2 client) at batch 16 gives the step losses of one process
#    at 32 within 1e-6 relative over 30 steps (boston_mlp, on the cpu), and
#    its test loss; the world line says "2 ranks on 1 host (MPI)";
#  - srun -n 2 --mpi=none (no PMI: each task would be a world of one) is
#    refused by every task, saying to use --mpi=pmix, rather than training
#    twice alone;
#  - a rank that fails (rank 1's data missing) ends the step, non-zero,
#    never a hang, and the job leaves the queue.
# Skipped (77) where netc was configured without MPI, when not root, where
# slurmctld, slurmd, srun, sinfo, squeue or scancel (Debian: slurm-wlm) or
# munged (munge) is missing, or where srun has no pmix type (srun
# --mpi=list). Everything the cluster ran — munged, slurmctld, slurmd,
# their slurmstepd and tasks — is ended on exit, on failure and on HUP, INT
# and TERM: found by the SLURM_CONF of this run in its environment.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

[ "${NETC_HAVE_MPI:-no}" = yes ] || skip "netc was configured without MPI (configure --with-mpi)"
[ "$(id -u)" = 0 ] || skip "not root: slurmd runs the jobs as their users only as root"
for c in slurmctld slurmd srun sinfo squeue scancel; do
    command -v $c > /dev/null || skip "no $c on the PATH (Debian: slurm-wlm)"
done
command -v munged > /dev/null || skip "no munged on the PATH (Debian: munge)"

# Slurm's clients read SLURM_CONF; a surrounding job's variables (this run
# inside an allocation) would point srun at a job our cluster never had
# shellcheck disable=SC2046
unset $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p')
conf=$WORK/slurm.conf
export SLURM_CONF="$conf"

# cleanup: every process of this cluster (SLURM_CONF=$conf in its
# environment: the daemons, slurmstepd, the tasks), asked with TERM and then
# killed; the jobs cancelled first, so that slurmd ends their steps
ours() {
    grep -lzxF "SLURM_CONF=$conf" /proc/[0-9]*/environ 2> /dev/null |
        sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | grep -vx $$
}
started=
# shellcheck disable=SC2086 # $pids: a list
cleanup() {
    trap '' HUP INT TERM # a signal now would leave the rest running
    if [ -n "$started" ]; then
        timeout 5 scancel --full --quiet --user=root > /dev/null 2>&1
        unset SLURM_CONF # ours' own grep is not the cluster's
        pids=$(ours)
        [ -n "$pids" ] && kill -TERM $pids 2> /dev/null
        i=0
        while [ -n "$(ours)" ] && [ $i -lt 50 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        pids=$(ours)
        [ -n "$pids" ] && kill -KILL $pids 2> /dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# listening PORT: whether a TCP socket (IPv4 or 6) listens on PORT
listening() {
    awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
        END { exit !f }' /proc/net/tcp /proc/net/tcp6 2> /dev/null
}
port=$((20000 + $$ % 4000 * 2)) i=0
while { listening $port || listening $((port + 1)); } && [ $i -lt 100 ]; do
    port=$((port + 2))
    i=$((i + 1))
done
node=$(hostname -s)

# munge: its socket's directory must be open to all (munged checks)
chmod 711 "$WORK"
mkdir -m 755 "$WORK/munge" "$WORK/state" "$WORK/spool" "$WORK/tmp"
dd if=/dev/urandom of="$WORK/munge/key" bs=128 count=1 2> /dev/null
chmod 600 "$WORK/munge/key"
cat > "$conf" << EOF
ClusterName=netc
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge/socket
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
TmpFS=$WORK/tmp
FirstJobId=$((port * 100))
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=netc Nodes=$node Default=YES MaxTime=INFINITE OverSubscribe=FORCE State=UP
EOF

# The daemons, each bounded (the whole test takes seconds); started is set
# first: a signal from here on ends them
started=yes
timeout 300 munged -F --socket="$WORK/munge/socket" --key-file="$WORK/munge/key" \
    --pid-file="$WORK/munge/pid" --seed-file="$WORK/munge/seed" \
    --log-file="$WORK/munge/log" > "$WORK/munged.out" 2>&1 &
i=0
while [ ! -S "$WORK/munge/socket" ] && [ $i -lt 50 ]; do
    sleep 0.1
    i=$((i + 1))
done
if [ ! -S "$WORK/munge/socket" ]; then
    echo "FAIL: munged made no socket in 5 s: $(tail -3 "$WORK/munged.out")" >&2
    exit 1
fi
timeout 300 slurmctld -D -i > "$WORK/slurmctld.out" 2>&1 &
timeout 300 slurmd -D > "$WORK/slurmd.out" 2>&1 &
i=0 state=
while [ "$state" != idle ] && [ $i -lt 60 ]; do
    sleep 0.5
    state=$(timeout 5 sinfo -h -n "$node" -o %t 2> /dev/null)
    i=$((i + 1))
done
if [ "$state" != idle ]; then
    echo "FAIL: the node is not idle after 30 s (sinfo: '$state'):" \
        "$(tail -3 "$WORK/slurmctld.log" "$WORK/slurmd.log" 2> /dev/null)" >&2
    exit 1
fi
timeout 10 srun --mpi=list > "$WORK/types" 2>&1
grep -q '^[[:space:]]*pmix$' "$WORK/types" || skip "srun has no pmix type: $(tr '\n' ' ' < "$WORK/types")"

# containers often forbid cross-memory attach
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# on_slurm ARGS...: srun, bounded; in the background, so that a signal to
# this script is taken at once
on_slurm() {
    timeout -k 5 120 srun "$@" &
    wait $!
}
run() { # NP ARGS...: two_ranks's launcher
    _np=$1
    shift
    on_slurm -n "$_np" --mpi=pmix "$@"
}

# 1. two tasks on the node
on_slurm -n 2 -l hostname -s > "$WORK/names" 2>&1
st=$?
names=$(sort "$WORK/names" | tr '\n' ' ')
check "[ $st -eq 0 ] && [ '$names' = '0: $node 1: $node ' ]" "srun -n 2 hostname (exit $st): $names"

# 2. training: 2 tasks x 16 against 1 process x 32
cd "$SRC" || exit 1 # the models name their data from the source tree
if ! "$NETC" --mpi models/boston_mlp.net -o "$WORK/mlp"; then
    echo "FAIL: netc --mpi models/boston_mlp.net" >&2
    exit 1
fi
two_ranks mlp "$WORK/mlp" cpu 30
check "grep -q '^world: 2 ranks on 1 host (MPI), each on cpu; batch 16 a rank, 32 in all' '$WORK/mlp.out'" \
    "no world line of 2 ranks: $(head -3 "$WORK/mlp.out")"

# 3. no PMI: refused by each task, not two runs alone
on_slurm -n 2 --mpi=none "$WORK/mlp" --max-steps 5 > "$WORK/none.out" 2>&1
st=$?
check "[ $st -eq 1 ] && [ \$(grep -c 'error: srun started 2 tasks without MPI.*--mpi=pmix' '$WORK/none.out') = 2 ]" \
    "srun --mpi=none (exit $st): $(head -3 "$WORK/none.out")"

# 4. a rank that fails ends the step: rank 1 is given data that is not there
on_slurm -n 2 --mpi=pmix sh -c 'd=$1 && shift && [ "$SLURM_PROCID" = 1 ] && set -- "$@" --data "$d"
    exec "$0" "$@"' "$WORK/mlp" "$WORK/none.csv" --max-steps 5 > "$WORK/fails.out" 2>&1
st=$?
check "[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q '(rank 1 of 2): error: .*none.csv' '$WORK/fails.out'" \
    "a rank without its data (exit $st): $(grep error "$WORK/fails.out" | head -3)"
i=0
while [ -n "$(timeout 5 squeue -h 2>&1)" ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
check "[ -z \"\$(timeout 5 squeue -h 2>&1)\" ]" "left in the queue: $(timeout 5 squeue -h 2>&1 | head -3)"
finish
