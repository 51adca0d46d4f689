# tests/signals.sh — the tests that send signals do not hang, and still
# pass, when the test suite is started with SIGINT ignored (as under nohup,
# or as a background job of a script) and run by dash: tests/gpu/run.sh
# runs them with sh.  (train.sh once hung there, waiting for a program
# that ignored its Ctrl-C, and died of dash's `kill -l INT`.)
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

command -v dash > /dev/null 2>&1 || skip "no dash"
command -v timeout > /dev/null 2>&1 || skip "no timeout"
for t in train emit; do
    # trap '' INT: SIGINT ignored from here down, as nohup leaves it
    timeout -k 10 600 dash -c 'trap "" INT; exec dash "$1"' sh "$SRC/tests/$t.sh" \
        > "$WORK/$t.log" 2>&1
    st=$?
    check "[ $st -eq 0 ]" "tests/$t.sh under dash with SIGINT ignored: exit $st$( [ $st -eq 124 ] && echo ' (timed out: it hung)'); $(grep FAIL "$WORK/$t.log" | head -5)"
done
finish
