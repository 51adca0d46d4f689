# tests/gradcheck.sh — every layer's and loss's generated backward pass
# against central finite differences.
#
# Each model in tests/gradcheck/ is compiled and run with --gradcheck on a
# few random samples: every gradient of every parameter (up to 64 values a
# tensor) and of the input is compared with (L(p+h) - L(p-h)) / 2h, h = 1e-3,
# in float32, passing when |analytic - numeric| <= 2e-4 + 5e-3 max(|a|, |n|)
# (tight enough that a 10 % error in tanh's derivative fails).
# Where the loss has a kink inside [p-h, p+h] (relu at 0, a maxpool tie),
# the one-sided differences disagree and the analytic gradient must equal
# one of them (an rnn's relu too).  relu_kink and maxpool_ties put inputs on the kinks on purpose.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

# random_csv SAMPLES FEATURES LABEL_KIND N SEED: LABEL_KIND class (N classes) or value (N values)
random_csv() {
    awk -v n="$1" -v f="$2" -v kind="$3" -v k="$4" -v seed="$5" 'BEGIN {
        srand(seed)
        for (i = 0; i < n; i++) {
            line = ""
            for (j = 0; j < f; j++) line = line sprintf("%.6f,", 2 * rand() - 1)
            if (kind == "class") line = line int(rand() * k)
            else for (j = 0; j < k; j++) line = line sprintf("%s%.6f", j ? "," : "", 2 * rand() - 1)
            print line
        }
    }'
}

run_check() { # MODEL DATA [EXTRA ENV]
    model=$1 data=$2
    prog=$WORK/$(basename "$model" .net)
    compile "$SRC/tests/gradcheck/$model" "$prog" || return
    out=$(NETRT_GRADCHECK_VERBOSE=1 "$prog" --data "$data" --gradcheck 4 --seed 3 2>&1)
    status=$?
    echo "$out" | grep -v '^kink' | sed "s/^/  $model: /"
    check "[ $status -eq 0 ]" "$model: gradcheck failed"
    check "echo \"\$out\" | grep -q ': ok$'" "$model: no gradcheck verdict"
}

random_csv 8 5 value 2 1 > "$WORK/x5v2.csv"
random_csv 8 6 class 4 2 > "$WORK/x6c4.csv"
random_csv 8 6 class 3 3 > "$WORK/x6c3.csv"
random_csv 8 16 class 2 4 > "$WORK/x16c2.csv"
random_csv 8 72 class 4 5 > "$WORK/x72c4.csv"
random_csv 8 70 value 3 6 > "$WORK/x70v3.csv"
random_csv 8 48 class 3 7 > "$WORK/x48c3.csv"

run_check mlp_tanh_mse.net "$WORK/x5v2.csv"
run_check sigmoid_nobias_xent.net "$WORK/x6c4.csv"
run_check leaky_relu.net "$WORK/x6c3.csv"
run_check standalone_acts.net "$WORK/x16c2.csv"
run_check conv_stride_pad.net "$WORK/x72c4.csv"
run_check conv_rect_avgpool.net "$WORK/x70v3.csv"
run_check conv1x1.net "$WORK/x48c3.csv"
run_check dropout.net "$WORK/x6c3.csv"
random_csv 8 72 class 3 8 > "$WORK/x72c3.csv"
run_check layouts.net "$WORK/x72c3.csv"
random_csv 8 60 class 3 9 > "$WORK/x60c3.csv"
run_check conv_paths.net "$WORK/x60c3.csv"
run_check batchnorm1d.net "$WORK/x6c3.csv"
run_check batchnorm2d.net "$WORK/x72c3.csv"
# rnns: a sample's rows hold its steps one after the other
random_csv 8 12 value 2 10 > "$WORK/x12v2.csv"
run_check rnn_tanh.net "$WORK/x12v2.csv"
random_csv 8 10 class 3 11 > "$WORK/x10c3.csv"
run_check rnn_relu_stacked.net "$WORK/x10c3.csv"
random_csv 8 4 value 2 12 > "$WORK/x4v2.csv"
run_check rnn_one_step.net "$WORK/x4v2.csv"

# relu at exactly 0: half the inputs are 0.  PyTorch defines relu'(0) = 0,
# the left derivative, and so must netc: every kink reports analytic == left.
cat > "$WORK/zeros.csv" <<'CSV'
0,0.5,0,-0.5,1
0,0,0.25,0,0
-1,0,0,2,1
0,1,0,0,0
CSV
run_check relu_kink.net "$WORK/zeros.csv"
kinks=$(echo "$out" | grep -c '^kink input' || true)
check "[ $kinks -gt 0 ]" "relu_kink: no kink was exercised"
bad=$(echo "$out" | awk '/^kink input/ { a = $4; l = $6; sub(",", "", a); sub(",", "", l); if (a + 0 != l + 0) print }')
check "[ -z \"\$bad\" ]" "relu_kink: relu'(0) is not 0 (PyTorch's convention): $bad"

# maxpool ties: each 2x2 window holds equal values.  The first element in
# scan order takes the whole gradient (right derivative), the others none.
cat > "$WORK/ties.csv" <<'CSV'
1,1,2,2,1,1,2,2,3,3,0,0,3,3,0,0,1
0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0
-1,-1,2,2,-1,-1,2,2,4,4,4,4,4,4,4,4,1
2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,0
CSV
run_check maxpool_ties.net "$WORK/ties.csv"
kinks=$(echo "$out" | grep -c '^kink input' || true)
check "[ $kinks -gt 0 ]" "maxpool_ties: no tie was exercised"

finish
