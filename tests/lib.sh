# tests/lib.sh — sourced by every shell test.
#
# Gives: $NETC (the compiler under test), $SRC (the source tree), $WORK (a
# fresh scratch directory for this test, removed on exit), and helpers:
#   compile MODEL PROG      netc MODEL -o PROG, failing the test on error
#   check COND MESSAGE      count a failed check (the test goes on)
#   finish                  exit 0 if every check passed, 1 otherwise
#   skip REASON             exit 77 (Automake's "skipped")
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

finish() {
    echo "$test_name: $checks checks, $failures failed"
    [ "$failures" -eq 0 ]
    exit $?
}

skip() {
    echo "SKIP: $*"
    exit 77
}
