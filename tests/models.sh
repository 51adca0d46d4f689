# tests/models.sh — every model under models/ (and the gradient-check
# models) compiles: --check prints a summary, --emit=c compiles with -Wall
# -Wextra -Werror (tests/emit.sh checks it is reproducible), and netc -o
# builds a program whose --help works.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

CC=${NETC_CC:-cc}
for model in "$SRC"/models/*.net "$SRC"/tests/gradcheck/*.net; do
    name=$(basename "$model" .net)
    check "'$NETC' --check '$model' > '$WORK/$name.summary'" "$name: --check failed"
    check "grep -q 'total parameters' '$WORK/$name.summary'" "$name: no summary"
    "$NETC" --emit=c "$model" -o "$WORK/$name.c"
    check "! grep -q '$SRC' '$WORK/$name.c'" "$name: the generated code holds an absolute path"
    check "$CC -std=c11 -Wall -Wextra -Werror -O1 -c -I'$SRC/runtime' '$WORK/$name.c' -o '$WORK/$name.o'" \
        "$name: the generated C does not compile cleanly"
    check "compile '$model' '$WORK/$name'" "$name: netc -o failed"
    check "'$WORK/$name' --help | grep -q -- '--max-steps'" "$name: the program's --help is wrong"
done
# paths with spaces, quotes and dollars reach the C compiler intact: netc
# runs it without a shell
odd="$WORK/a dir with 'quotes' and \$dollars"
mkdir -p "$odd"
cp "$SRC/models/boston_linear.net" "$odd/my model.net"
check "'$NETC' \"\$odd/my model.net\" -o \"\$odd/my program\"" "netc failed on paths with spaces and quotes"
check "[ -x \"\$odd/my program\" ] && \"\$odd/my program\" --help > /dev/null" "the program built at an odd path does not run"
check "[ \$(ls -A \"\$odd\" | wc -l) -eq 2 ]" "netc left temporary files beside its output: $(ls -A "$odd")"
finish
