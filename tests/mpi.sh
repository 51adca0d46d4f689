# tests/mpi.sh — data-parallel training over MPI (netc --mpi, mpirun -np 2,
# oversubscribed on any number of cores), on the cpu:
#  - 2 ranks at batch B give the step losses of one process at batch 2B
#    over the same order, within 1e-6 relative over 100 steps, for an MLP
#    (boston_mlp: Adam, standardized, shuffled) and a CNN (digits_cnn with
#    SGD and momentum; Adam divides by the root of a running square, which
#    magnifies the last bit of a near-zero gradient: 1.04e-6 at step 100),
#    across epoch ends and the epoch's partial last batch; the test loss
#    and accuracy, evaluated in shares and summed, agree too; and for
#    image lists with random flips (the loader's threads make each share);
#  - with dropout and batchnorm (not the same steps), the same test accuracy
#    within a point after 5 epochs;
#  - a last batch smaller than the ranks (one rank with no sample);
#  - rank 0 alone writes (--metrics, --save) and prints (the world line);
#  - a program built with --mpi and run alone trains as one built without;
#  - ranks that differ (a flag) are refused, naming the rank; a rank that
#    fails alone (its data missing) ends the run, non-zero, never a hang;
#  - --resume on the same ranks goes on exactly; on other ranks refused;
#  - a rank killed ends the run (mpirun names it); Ctrl-C to mpirun: rank 0
#    saves a checkpoint, as a single process does.
# Skipped (77) where netc was configured without MPI or mpirun is missing.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

mpi_setup 120

cd "$SRC" || exit 1 # the models name their data from the source tree
compile_mpi() { # MODEL PROG
    "$NETC" --mpi "$1" -o "$2" || { echo "FAIL: netc --mpi $1" >&2; failures=$((failures + 1)); }
}
sed 's/adam(lr=1e-3)/sgd(lr=0.05, momentum=0.9)/' models/digits_cnn.net > "$WORK/cnn.net"
compile_mpi models/boston_mlp.net "$WORK/mlp"
compile_mpi "$WORK/cnn.net" "$WORK/cnn"

# 1. exact: 2 ranks at 16 against 1 process at 32, 100 steps (boston: 405
# samples, epochs of 12 steps and a last of 21 samples; digits: 3823)
for m in mlp cnn; do
    two_ranks $m "$WORK/$m" cpu 100
    check "[ \$(grep -c '\"step\"' '$WORK/$m.two') -eq 100 ]" "$m: --metrics written by more than rank 0"
    check "[ \$(grep -c '^world: 2 ranks on 1 host (MPI), each on cpu; batch 16 a rank, 32 in all' '$WORK/$m.out') -eq 1 ]" \
        "$m: no world line (once): $(head -3 "$WORK/$m.out")"
    check "[ \$(grep -c '^test_loss' '$WORK/$m.out') -eq 1 ]" "$m: ranks other than 0 print"
    check "grep -q '^communication: [0-9.]* ms a step' '$WORK/$m.out'" "$m: no communication line"
done
a1=$(field "$WORK/cnn.one" test_accuracy) a2=$(field "$WORK/cnn.two" test_accuracy)
check "[ -n '$a1' ] && [ '$a1' = '$a2' ]" "cnn: test accuracy $a2 on 2 ranks, $a1 alone"

# dropout (each rank its own masks) and batchnorm (each rank's own batch
# statistics, rank 0's running ones): not the same steps, the same place:
# 5 epochs of digits_cnn_bn with a dropout layer, 2 x 16 against 1 x 32,
# test accuracies within a point (97.6 % and 97.7 % here)
sed '/^    linear(10)/i\    dropout(0.25)' models/digits_cnn_bn.net > "$WORK/bnd.net"
compile_mpi "$WORK/bnd.net" "$WORK/bnd"
"$WORK/bnd" --device cpu --batch 32 --epochs 5 --metrics "$WORK/bnd.one" --quiet
run 2 "$WORK/bnd" --device cpu --batch 16 --epochs 5 --metrics "$WORK/bnd.two" --quiet \
    > "$WORK/bnd.out" 2>&1
check "[ $? -eq 0 ]" "dropout and batchnorm on 2 ranks: $(head -3 "$WORK/bnd.out")"
a1=$(field "$WORK/bnd.one" test_accuracy) a2=$(field "$WORK/bnd.two" test_accuracy)
echo "dropout and batchnorm, 5 epochs: test accuracy $a1 alone, $a2 on 2 ranks"
check "awk -v a='$a1' -v b='$a2' 'BEGIN { d = a - b; exit !(a > 0.95 && (d < 0 ? -d : d) <= 0.01) }'" \
    "dropout and batchnorm: test accuracy $a2 on 2 ranks, $a1 alone (within 0.01, above 0.95)"

# images: the loader's threads make each rank's share of every batch, with
# the flips an unshared batch has (cnn101 on data/digit_images, validated)
compile_mpi models/cnn101.net "$WORK/img"
if "$WORK/img" --device cpu --max-steps 0 2>&1 | grep -q 'built without stb_image'; then
    echo "images: skipped, the runtime was built without stb_image"
else
    two_ranks img "$WORK/img" cpu 30
    check "close '$(field "$WORK/img.one" valid_loss)' '$(field "$WORK/img.two" valid_loss)' 1e-6" \
        "images: the validation loss differs"
fi

# 2. a last batch of one sample: rank 0 has none (405 = 2 x 202 + 1)
last_of_one "$WORK/mlp" cpu 3

# 3. rank 0's weights are the run's
run 2 "$WORK/mlp" --device cpu --batch 16 --max-steps 30 --save "$WORK/w.safetensors" --quiet
check "[ $? -eq 0 ] && [ -s '$WORK/w.safetensors' ]" "--save on 2 ranks"
"$WORK/mlp" --device cpu --load "$WORK/w.safetensors" --eval --metrics "$WORK/eval.one" --quiet
run 2 "$WORK/mlp" --device cpu --batch 16 --max-steps 30 --metrics "$WORK/run.two" --quiet
check "close '$(field "$WORK/run.two" test_loss)' '$(field "$WORK/eval.one" test_loss)' 1e-6" \
    "the saved weights do not give the run's test loss"

# 4. built with --mpi, run alone: as built without (bit for bit)
"$NETC" models/boston_mlp.net -o "$WORK/plain" || failures=$((failures + 1))
for p in mlp plain; do
    "$WORK/$p" --device cpu --max-steps 40 --metrics "$WORK/$p.alone" --log-every 1 --quiet
done
d=$(losses "$WORK/mlp.alone" "$WORK/plain.alone")
check "[ '$d' = '40 0' ]" "a --mpi program alone differs from a plain one: $d"
run 1 "$WORK/mlp" --device cpu --max-steps 40 --metrics "$WORK/np1" --log-every 1 > "$WORK/np1.out" 2>&1
d=$(losses "$WORK/mlp.alone" "$WORK/np1")
check "[ '$d' = '40 0' ] && ! grep -q '^world' '$WORK/np1.out'" "mpirun -np 1 is not a run alone: $d"

# 5. ranks that differ; a rank that fails alone
run 1 "$WORK/mlp" --max-steps 5 --seed 1 : -np 1 "$WORK/mlp" --max-steps 5 --seed 2 \
    > "$WORK/differ.out" 2>&1
check "[ $? -ne 0 ] && grep -q 'error: rank 1 differs from rank 0' '$WORK/differ.out'" \
    "ranks with different seeds: $(grep error "$WORK/differ.out" | head -3)"
run 1 "$WORK/mlp" --max-steps 5 : -np 1 "$WORK/mlp" --max-steps 5 --data "$WORK/none.csv" \
    > "$WORK/fails.out" 2>&1
st=$?
check "[ $st -ne 0 ] && [ $st -ne 124 ] && grep -q '(rank 1 of 2): error: .*none.csv' '$WORK/fails.out'" \
    "a rank without its data (exit $st): $(grep error "$WORK/fails.out" | head -3)"
run 2 "$WORK/mlp" --gradcheck 2 > "$WORK/gc.out" 2>&1
check "[ $? -ne 0 ] && [ \$(grep -c 'error: --gradcheck runs in one process' '$WORK/gc.out') -eq 1 ]" \
    "--gradcheck on 2 ranks: $(cat "$WORK/gc.out" | head -3)"

# 6. --resume: on 2 ranks, exactly as if never stopped; alone, refused
run 2 "$WORK/mlp" --device cpu --batch 16 --max-steps 20 --metrics "$WORK/straight" --log-every 1 --quiet
run 2 "$WORK/mlp" --device cpu --batch 16 --max-steps 7 --checkpoint "$WORK/ck" --metrics "$WORK/parts" \
    --log-every 1 --quiet
run 2 "$WORK/mlp" --device cpu --resume "$WORK/ck" --max-steps 20 --metrics "$WORK/parts" --log-every 1 \
    --quiet > "$WORK/resume.out" 2>&1
check "[ $? -eq 0 ]" "--resume on 2 ranks: $(head -3 "$WORK/resume.out")"
d=$(losses "$WORK/straight" "$WORK/parts")
check "[ '$d' = '20 0' ]" "a run resumed on 2 ranks differs from one never stopped: $d"
"$WORK/mlp" --device cpu --resume "$WORK/ck" > "$WORK/alone.out" 2>&1
check "[ $? -ne 0 ] && grep -q 'the run was on 2 ranks; resume it on 2' '$WORK/alone.out'" \
    "a 2-rank checkpoint resumed alone: $(cat "$WORK/alone.out")"

# 7. faults: a rank killed (kill -9) ends the run, which names it; Ctrl-C
# to mpirun (it sends the ranks SIGTERM): rank 0 saves a checkpoint
ranks() { # PATTERN: the pids of the ranks, once both run (at most 10 s)
    _i=0
    while [ "$(pgrep -f "$1" | wc -l)" -lt 2 ] && [ $_i -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
    pgrep -f "$1"
}
$default_signals mpirun -np 2 "$WORK/mlp" --device cpu --epochs 99999 --quiet > "$WORK/kill.out" 2>&1 &
job=$!
pid=$(ranks "$WORK/mlp --device cpu --epochs 99999" | tail -n 1)
[ -n "$pid" ] && sleep 0.5 && kill -KILL "$pid"
await $job
st=$?
check "[ -n '$pid' ] && [ $st -ne 0 ] && grep -q 'rank [01] .*exited on signal 9' '$WORK/kill.out'" \
    "a rank killed (exit $st): $(head -5 "$WORK/kill.out")"
$default_signals mpirun -np 2 "$WORK/mlp" --device cpu --epochs 99999 --quiet --checkpoint "$WORK/ck2" \
    > "$WORK/int.out" 2>&1 &
job=$!
# once the first epoch's checkpoint is there, every rank trains and has its
# handlers (a signal that came before them, while a loaded machine still
# starts the ranks, would end them silently): at most 30 s
_i=0
while [ ! -e "$WORK/ck2/checkpoint.safetensors" ] && [ $_i -lt 300 ]; do
    sleep 0.1
    _i=$((_i + 1))
done
sleep 0.2
stop $job INT
check "[ $? -ne 0 ] && grep -q 'rank 0 of 2): stopped by SIGTERM in epoch .* saved to' '$WORK/int.out'" \
    "Ctrl-C to mpirun: $(head -5 "$WORK/int.out")"
run 2 "$WORK/mlp" --device cpu --resume "$WORK/ck2" --epochs 1 --quiet > "$WORK/int2.out" 2>&1
check "[ $? -eq 0 ]" "resuming after Ctrl-C: $(head -3 "$WORK/int2.out")"
finish
