# tests/mpi_hosts.sh — data-parallel training across two hosts (netc --mpi),
# the hosts made on this machine: two network namespaces, each with a
# hostname of its own (a UTS namespace), joined by a veth pair on
# 10.18.0.0/24. mpirun runs on the first and starts its daemon on the
# second as it would over ssh, through an agent (plm_rsh_agent) that runs
# the command there with `ip netns exec`. The ranks talk over TCP on the
# veth alone: btl tcp,self (no vader: no shared memory between them), pml
# ob1 (not UCX, which chooses transports of its own). Checks:
#  - mpirun starts rank 0 on the first host, 1 on the second, each under
#    its host's name;
#  - the world line says "2 ranks on 2 hosts";
#  - 2 ranks at batch 16 give the step losses of one process at 32 within
#    1e-6 relative over 50 steps (boston_mlp, on the cpu), and its test loss;
#  - the veth carried, each way, more than the run's gradients need (50
#    steps x 801 floats x 4 bytes; a run of one step carries about 10 KB);
#  - a rank that fails on the second host (its data missing) ends the run,
#    non-zero, never a hang, and nothing is left running on that host.
# Skipped (77) where netc was configured without MPI or mpirun is missing,
# when not root, without ip (iproute2) or unshare (util-linux), or where
# network namespaces, veth or UTS namespaces are not permitted. The
# namespaces (and the veth with them) are removed on exit, on failure and
# on HUP, INT and TERM; only a SIGKILL of this script leaves them behind:
# `ip netns list` shows them as netc-PID-a and netc-PID-b.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

[ "${NETC_HAVE_MPI:-no}" = yes ] || skip "netc was configured without MPI (configure --with-mpi)"
command -v mpirun > /dev/null || skip "no mpirun on the PATH (Debian: openmpi-bin)"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip > /dev/null || skip "no ip on the PATH (Debian: iproute2)"
command -v unshare > /dev/null || skip "no unshare on the PATH (util-linux)"

# The two hosts: a network namespace, its end of the veth, its address, its
# name. The subnet exists only inside them: runs side by side do not clash.
ns_a=netc-$$-a veth_a=netc$$a ip_a=10.18.0.1 name_a=netc-a
ns_b=netc-$$-b veth_b=netc$$b ip_b=10.18.0.2 name_b=netc-b
net=10.18.0.0/24

# cleanup: the namespaces this run made, once what was left running in
# them (processes of this run) is killed; the veth goes with them
made=
cleanup() {
    for ns in $made; do
        for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
        ip netns delete "$ns"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$ns_a" 2> "$WORK/err" || skip "no network namespaces here: $(cat "$WORK/err")"
made=$ns_a
ip netns add "$ns_b" 2> "$WORK/err" || skip "no second network namespace: $(cat "$WORK/err")"
made="$ns_a $ns_b"
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" 2> "$WORK/err" ||
    skip "no veth pair: $(cat "$WORK/err")"
ip netns exec "$ns_a" unshare --uts sh -c 'hostname netc-test && hostname' > "$WORK/uts" 2>&1
[ "$(cat "$WORK/uts")" = netc-test ] || skip "no UTS namespace (unshare --uts): $(cat "$WORK/uts")"

host() { # NS VETH ADDRESS: the host's network, its loopback and the veth up
    ip -n "$1" link set lo up && ip -n "$1" address add "$3/24" dev "$2" && ip -n "$1" link set "$2" up
}
up() { ip -n "$1" link show "$2" | grep -q 'state UP'; } # NS VETH: carrier on
if ! host "$ns_a" "$veth_a" "$ip_a" || ! host "$ns_b" "$veth_b" "$ip_b"; then
    echo "FAIL: the hosts' network" >&2
    exit 1
fi
i=0
while ! { up "$ns_a" "$veth_a" && up "$ns_b" "$veth_b"; } && [ $i -lt 50 ]; do
    sleep 0.1
    i=$((i + 1))
done
check "up '$ns_a' '$veth_a' && up '$ns_b' '$veth_b'" "the veth is not up after 5 s"

# The agent, run by mpirun as it would run ssh (AGENT HOST COMMAND...):
# COMMAND, by a shell (as sshd runs it), in HOST's namespace, under its
# name. OpenMPI tells the nodes apart by their daemons (a hostfile line
# each), and MPI_Comm_split_type(SHARED) by them: the runtime counts 2
# hosts even with one hostname; the names are so that each host's own
# messages (mpirun's, the ranks') say which it is, as on a cluster.
cat > "$WORK/agent" << EOF
#!/bin/sh
case \$1 in
$ip_a) ns=$ns_a name=$name_a ;;
$ip_b) ns=$ns_b name=$name_b ;;
*) echo "\$0: no host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$*"' "\$name" "\$@"
EOF
chmod +x "$WORK/agent"
printf '%s slots=1\n' "$ip_a" "$ip_b" > "$WORK/hostfile"

# OpenMPI: CI runs as root; no binding (each host sees all the machine's
# cores: both ranks would be bound to the first)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_hwloc_base_binding_policy=none
# on_hosts ARGS...: mpirun on host a, a rank a host, over the veth; bounded.
# In the background, so that a signal to this script is taken at once (the
# shell waits for a command in the foreground first): cleanup then kills
# mpirun and all it started, in the namespaces.
on_hosts() {
    timeout -k 5 120 ip netns exec "$ns_a" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name_a" \
        mpirun --hostfile "$WORK/hostfile" --map-by node --mca plm rsh \
        --mca plm_rsh_agent "$WORK/agent" --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include $net --mca oob_tcp_if_include $net "$@" &
    wait $!
}
bytes() { ip netns exec "$ns_a" cat "/sys/class/net/$veth_a/statistics/$1_bytes"; } # rx or tx

# 1. rank 0 on host a, rank 1 on host b, each under its host's name
on_hosts -np 2 --tag-output hostname > "$WORK/names" 2>&1
st=$?
# (mpirun may also say "plm:rsh: Warning: setpgid(...) failed in parent":
# the agent had already exec'd, a harmless race of OpenMPI's)
names=$(sed -n 's/^\[[0-9]*,\([0-9]*\)\]<stdout>:/\1 /p' "$WORK/names" | sort | tr '\n' ' ')
check "[ $st -eq 0 ] && [ '$names' = '0 $name_a 1 $name_b ' ]" "mpirun on the two hosts: $(head -5 "$WORK/names")"

# 2. training: 2 hosts x 16 against 1 process x 32, over the veth
cd "$SRC" || exit 1 # the models name their data from the source tree
if ! "$NETC" --mpi models/boston_mlp.net -o "$WORK/mlp"; then
    echo "FAIL: netc --mpi models/boston_mlp.net" >&2
    exit 1
fi
params=$("$NETC" --check models/boston_mlp.net | sed -n 's/.*total parameters: \([0-9]*\).*/\1/p')
"$WORK/mlp" --device cpu --batch 32 --max-steps 50 --metrics "$WORK/one" --log-every 1 --quiet
rx=$(bytes rx) tx=$(bytes tx)
on_hosts -np 2 "$WORK/mlp" --device cpu --batch 16 --max-steps 50 --metrics "$WORK/two" \
    --log-every 1 > "$WORK/two.out" 2>&1
st=$?
rx=$(($(bytes rx) - rx)) tx=$(($(bytes tx) - tx))
check "[ $st -eq 0 ]" "training on 2 hosts (exit $st): $(head -5 "$WORK/two.out")"
check "grep -q '^world: 2 ranks on 2 hosts (MPI), each on cpu; batch 16 a rank, 32 in all' '$WORK/two.out'" \
    "no world line of 2 hosts: $(head -3 "$WORK/two.out")"
d=$(losses "$WORK/one" "$WORK/two")
echo "2 hosts x 16 against 1 x 32: steps, largest relative difference: $d"
check "[ '${d%% *}' = 50 ] && below '${d#* }' 1e-6" "step losses differ: $d"
t1=$(field "$WORK/one" test_loss) t2=$(field "$WORK/two" test_loss)
check "close '$t1' '$t2' 1e-6" "test loss $t2 on 2 hosts, $t1 alone"
need=$((50 * ${params:-0} * 4))
echo "the veth: $rx bytes in, $tx out on host a; the gradients need $need each way"
check "[ $need -gt 0 ] && [ $rx -gt $need ] && [ $tx -gt $need ]" \
    "the run did not cross the veth: $rx bytes in, $tx out, $need needed"

# 3. a rank that fails on host b ends the run, there too
on_hosts -np 1 "$WORK/mlp" --max-steps 5 : -np 1 "$WORK/mlp" --max-steps 5 --data "$WORK/none.csv" \
    > "$WORK/fails.out" 2>&1
st=$?
check "[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q '(rank 1 of 2): error: .*none.csv' '$WORK/fails.out'" \
    "a rank without its data on host b (exit $st): $(grep error "$WORK/fails.out" | head -3)"
i=0
while [ -n "$(ip netns pids "$ns_b")" ] && [ $i -lt 50 ]; do
    sleep 0.1
    i=$((i + 1))
done
check "[ -z \"\$(ip netns pids '$ns_b')\" ]" "left running on host b: $(ip netns pids "$ns_b" | tr '\n' ' ')"
finish
