# tests/gradcheck/data.sh — sourced: the data each model of tests/gradcheck
# is run on (tests/gradcheck.sh checks its gradients on it, tests/emu_train.sh
# trains it on the cpu and the emulated GPU).
#
# gradcheck_data MODEL FILE [SAMPLES]: writes MODEL's data (its name without
# .net) to FILE: SAMPLES random rows (default 8) of the shape its input and
# target take, from a seed of its own; relu_kink's and maxpool_ties' are
# fixed rows on the kinks (SAMPLES is then ignored).
# gradcheck_data_dir DIR SAMPLES: every model's, as DIR/MODEL.csv.

# random_csv SAMPLES FEATURES LABEL_KIND N SEED: LABEL_KIND class (N classes) or value (N values).
# Its numbers come from the minimal standard generator (Park and Miller:
# s = 16807 s mod 2^31 - 1, exact in any awk's doubles), not awk's rand(),
# which differs between awks and between their versions: the same rows on
# every machine (an H200 machine's awk once drew a point where one value of
# smooth_acts sat next to elu(0.7)'s kink, which no machine here could replay).
random_csv() {
    awk -v n="$1" -v f="$2" -v kind="$3" -v k="$4" -v seed="$5" '
    function uniform() { s = (s * 16807) % 2147483647; return s / 2147483647 }
    BEGIN {
        s = seed * 7919 + 1
        for (i = 0; i < 8; i++) uniform() # away from the small first draws of a small seed
        for (i = 0; i < n; i++) {
            line = ""
            for (j = 0; j < f; j++) line = line sprintf("%.6f,", 2 * uniform() - 1)
            if (kind == "class") line = line int(uniform() * k)
            else for (j = 0; j < k; j++) line = line sprintf("%s%.6f", j ? "," : "", 2 * uniform() - 1)
            print line
        }
    }'
}

gradcheck_data() {
    _n=${3:-8}
    case $1 in
    # relu at exactly 0: half the inputs are 0
    relu_kink) printf '%s\n' 0,0.5,0,-0.5,1 0,0,0.25,0,0 -1,0,0,2,1 0,1,0,0,0 > "$2" ;;
    # maxpool ties: each 2x2 window holds equal values
    maxpool_ties) printf '%s\n' 1,1,2,2,1,1,2,2,3,3,0,0,3,3,0,0,1 \
        0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0 \
        -1,-1,2,2,-1,-1,2,2,4,4,4,4,4,4,4,4,1 2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,0 > "$2" ;;
    mlp_tanh_mse) random_csv "$_n" 5 value 2 1 > "$2" ;;
    sigmoid_nobias_xent) random_csv "$_n" 6 class 4 2 > "$2" ;;
    leaky_relu | dropout | batchnorm1d) random_csv "$_n" 6 class 3 3 > "$2" ;;
    standalone_acts) random_csv "$_n" 16 class 2 4 > "$2" ;;
    conv_stride_pad) random_csv "$_n" 72 class 4 5 > "$2" ;;
    conv_rect_avgpool) random_csv "$_n" 70 value 3 6 > "$2" ;;
    conv1x1) random_csv "$_n" 48 class 3 7 > "$2" ;;
    layouts | batchnorm2d) random_csv "$_n" 72 class 3 8 > "$2" ;;
    conv_paths) random_csv "$_n" 60 class 3 9 > "$2" ;;
    # rnns: a sample's row holds its steps one after the other
    rnn_tanh) random_csv "$_n" 12 value 2 10 > "$2" ;;
    rnn_relu_stacked) random_csv "$_n" 10 class 3 11 > "$2" ;;
    rnn_one_step) random_csv "$_n" 4 value 2 12 > "$2" ;;
    smooth_acts) random_csv "$_n" 6 class 3 13 > "$2" ;;
    # (not seed 16: with its rows, one first-layer weight of residual's has
    # kinks within 1e-4 of it, which gradcheck's finer differences still hold)
    residual) random_csv "$_n" 72 class 3 24 > "$2" ;;
    branches) random_csv "$_n" 72 class 3 17 > "$2" ;;
    blocks) random_csv "$_n" 72 class 3 18 > "$2" ;;
    concat) random_csv "$_n" 72 class 3 19 > "$2" ;;
    mul) random_csv "$_n" 72 class 3 20 > "$2" ;;
    l1) random_csv "$_n" 5 value 2 21 > "$2" ;;
    smooth_l1) random_csv "$_n" 4 value 3 22 > "$2" ;;
    broadcast) random_csv "$_n" 72 class 3 23 > "$2" ;;
    input_operands) random_csv "$_n" 6 class 3 25 > "$2" ;;
    mixed_layouts) random_csv "$_n" 72 class 3 26 > "$2" ;;
    winograd) random_csv "$_n" 128 class 3 27 > "$2" ;;
    relu_pool) random_csv "$_n" 98 class 3 28 > "$2" ;;
    *) echo "gradcheck_data: no data for $1" >&2; return 1 ;;
    esac
}

gradcheck_data_dir() {
    mkdir -p "$1"
    for _f in "$SRC"/tests/gradcheck/*.net; do
        _m=$(basename "$_f" .net)
        gradcheck_data "$_m" "$1/$_m.csv" "$2"
    done
}
