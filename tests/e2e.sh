# tests/e2e.sh — the seed models trained end to end, as a user runs them.
#
#  - boston_mlp on the bundled Boston housing data reaches a test MSE below
#    12 (a held-out 20 %; it ends near 6 with the default seed), boston_linear
#    below 30 (about 17);
#  - digits_cnn, with no flags at all, reaches >= 95 % test accuracy, and
#    digits_resnet (two residual blocks) >= 97 % (about 98.8);
#  - cnn101, with no flags, trains on the bundled digit images (a list of
#    PNGs, resized, flipped, normalised) to >= 70 % test accuracy;
#  - airline_rnn (an rnn over windows of the airline-passengers series)
#    predicts the test months' changes with less than half the squared error
#    of the naive forecast "no change" (about 0.15 against 1.17);
#  - cifar10, and cnn101 made to read records, train 20 steps on synthetic
#    data in CIFAR-10's format (binary records whose pixels depend on the
#    label) and the loss of the last steps is below that of the first;
#  - save then load is exact, and two runs with one seed are bit-identical.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

last() { # FILE KEY: the value of KEY in the last record of FILE that has it
    grep "\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p"
}

for m in boston_mlp boston_linear digits_cnn digits_resnet digits_mlp cifar10 cnn101 airline_rnn; do
    compile "$SRC/models/$m.net" "$WORK/$m"
done
sed -e '/^ *transform /d' -e '/^ *valid /d' -e 's/images("[^"]*")/cifar10("-")/' "$SRC/models/cnn101.net" \
    >"$WORK/cnn101_records.net"
compile "$WORK/cnn101_records.net" "$WORK/cnn101_records"

# The models find their bundled data relative to the source tree.
cd "$SRC" || exit 1

"$WORK/boston_mlp" --quiet --metrics "$WORK/bm.jsonl"
mse=$(last "$WORK/bm.jsonl" test_loss)
echo "boston_mlp: test MSE $mse"
check "awk 'BEGIN { exit !($mse < 12) }'" "boston_mlp: test MSE $mse is not below 12"

"$WORK/boston_linear" --quiet --metrics "$WORK/bl.jsonl"
mse=$(last "$WORK/bl.jsonl" test_loss)
echo "boston_linear: test MSE $mse"
check "awk 'BEGIN { exit !($mse < 30) }'" "boston_linear: test MSE $mse is not below 30"

# MODEL MIN: the program trained with no flags at all exits 0, its test
# accuracy MIN % or more
trains_to() {
    "$WORK/$1" > "$WORK/$1.out"
    status=$?
    tail -n 3 "$WORK/$1.out"
    acc=$(tail -n 1 "$WORK/$1.out" | sed -n 's/.*test_accuracy \([0-9.]*\)%.*/\1/p')
    check "[ $status -eq 0 ]" "$1: exit status $status"
    check "awk 'BEGIN { exit !(\"$acc\" + 0 >= $2) }'" "$1: test accuracy '$acc' is below $2 %"
}
trains_to digits_cnn 95
trains_to digits_resnet 97
trains_to cnn101 70
# the naive forecast predicts a change of 0: its MSE is the mean square of
# the targets (the last column)
"$WORK/airline_rnn" --quiet --metrics "$WORK/air.jsonl"
mse=$(last "$WORK/air.jsonl" test_loss)
naive=$(awk -F, 'NR > 1 { s += $NF * $NF; n++ } END { print s / n }' data/airline_test.csv)
echo "airline_rnn: test MSE $mse, the naive forecast's $naive"
check "awk 'BEGIN { exit !($mse < 0.5 * $naive) }'" "airline_rnn: test MSE $mse is not below half the naive forecast's $naive"

# synthetic CIFAR-format data: the label shifts the mean of one channel
synth() { # FILE RECORDS CLASSES SEED
    awk -v n="$2" -v k="$3" -v seed="$4" 'BEGIN {
        srand(seed)
        for (i = 0; i < n; i++) {
            label = int(rand() * k)
            printf "%c", label
            for (p = 0; p < 3072; p++) {
                v = int(rand() * 128) + (p < 1024 ? int(127 * label / (k - 1)) : 64)
                printf "%c", v
            }
        }
    }' > "$1"
}
LC_ALL=C synth "$WORK/c10.bin" 640 10 1
LC_ALL=C synth "$WORK/c101.bin" 320 101 2
check "[ \$(wc -c < '$WORK/c10.bin') -eq $((640 * 3073)) ]" "synthetic cifar10 data has the wrong size"

falls() { # PROG DATA NAME
    "$1" --data "$2" --test-data "$2" --max-steps 20 --log-every 1 --metrics "$WORK/$3.jsonl" \
        --lr 0.05 --quiet
    first=$(grep '"step"' "$WORK/$3.jsonl" | head -n 5 | sed 's/.*"loss": \([^}]*\)}/\1/' | awk '{ s += $1 } END { print s / NR }')
    final=$(grep '"step"' "$WORK/$3.jsonl" | tail -n 5 | sed 's/.*"loss": \([^}]*\)}/\1/' | awk '{ s += $1 } END { print s / NR }')
    steps=$(grep -c '"step"' "$WORK/$3.jsonl")
    echo "$3: 20 steps, mean loss of the first 5 $first, of the last 5 $final"
    check "[ $steps -eq 20 ]" "$3: $steps step records, expected 20"
    check "awk 'BEGIN { exit !($final < $first) }'" "$3: the loss did not fall ($first -> $final)"
}
falls "$WORK/cifar10" "$WORK/c10.bin" cifar10
falls "$WORK/cnn101_records" "$WORK/c101.bin" cnn101_records

# save -> load is exact: the weights saved, loaded and saved again are the
# same bytes, and --eval of loaded weights gives the saved run's test loss.
p=$WORK/digits_mlp
"$p" --quiet --epochs 1 --save "$WORK/w1.safetensors" --metrics "$WORK/w1.jsonl"
"$p" --quiet --load "$WORK/w1.safetensors" --max-steps 0 --save "$WORK/w2.safetensors"
check "cmp -s '$WORK/w1.safetensors' '$WORK/w2.safetensors'" "save -> load -> save changed the weights"
"$p" --quiet --load "$WORK/w1.safetensors" --eval --metrics "$WORK/w3.jsonl"
check "[ \"\$(last '$WORK/w1.jsonl' test_loss)\" = \"\$(last '$WORK/w3.jsonl' test_loss)\" ]" \
    "loaded weights evaluate differently from the saved run"

# one seed, one set of flags: bit-identical losses and weights
strip() { sed 's/, "seconds".*//' "$1"; }
"$p" --quiet --epochs 2 --seed 7 --log-every 1 --metrics "$WORK/r1.jsonl" --save "$WORK/r1.safetensors"
"$p" --quiet --epochs 2 --seed 7 --log-every 1 --metrics "$WORK/r2.jsonl" --save "$WORK/r2.safetensors"
check "[ \"\$(strip '$WORK/r1.jsonl')\" = \"\$(strip '$WORK/r2.jsonl')\" ]" "two runs with one seed logged different losses"
check "cmp -s '$WORK/r1.safetensors' '$WORK/r2.safetensors'" "two runs with one seed ended with different weights"
"$p" --quiet --epochs 2 --seed 8 --log-every 1 --metrics "$WORK/r3.jsonl"
check "[ \"\$(strip '$WORK/r1.jsonl')\" != \"\$(strip '$WORK/r3.jsonl')\" ]" "another seed gave the same run"

finish
