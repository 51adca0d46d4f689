#!/bin/sh
# tests/errors.sh — the error-message corpus: netc's messages, word for word.
#
# Every tests/errors/NAME.net is a broken model and NAME.err the exact
# stderr that `netc --check NAME.net` must print, run from tests/errors/ so
# that the messages name the file as just NAME.net.  For each case this
# checks that
#   - netc --check exits 1, prints nothing on stdout, and prints NAME.err
#     on stderr exactly (the diff is shown when not);
#   - the messages are gcc-style: every line is FILE:LINE:COL: error|note:
#     (LINE and COL from 1), FILE: error:, a source line, a caret line, or
#     the closing "N errors" count (present, and right, when N > 1); each
#     located error quotes its line LINE with the caret at column COL;
#   - netc -o OUT NAME.net also exits 1 with the same messages, and writes
#     neither OUT nor any temporary file (no half-written output);
# every run under `timeout 10`, so that a hang fails too.
#
# Run by Automake (`make check`) with NETC and NETC_TOP_SRCDIR set; by hand,
# from the top of the build tree:
#   NETC=$PWD/netc NETC_TOP_SRCDIR=$PWD sh tests/errors.sh
#
# For maintainers: after a deliberate change to a message, or to add a case
# (write tests/errors/NAME.net), rewrite every NAME.err from the current
# compiler with
#   NETC=$PWD/netc NETC_TOP_SRCDIR=$PWD sh tests/errors.sh --regen
# then read `git diff tests/errors` and judge each changed message as a user
# would before committing it: --regen records whatever netc prints.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

LC_ALL=C
export LC_ALL
# The runs happen in tests/errors, so every path must be absolute.
SRC=$(cd "$SRC" && pwd)
case $NETC in
/*) ;;
*/*) NETC=$(pwd)/$NETC ;;
esac
DIR=$SRC/tests/errors
if command -v timeout >/dev/null 2>&1; then
    TIMEOUT="timeout 10"
else
    TIMEOUT=
    echo "note: no timeout(1); a hang will not be caught" >&2
fi
mkdir "$WORK/tmp" || exit 99

if [ ! -f "$DIR/empty.net" ]; then
    echo "FAIL: no cases in $DIR" >&2
    exit 99
fi

# ---------------------------------------------------------------- --regen

if [ "${1-}" = --regen ]; then
    n=0
    for net in "$DIR"/*.net; do
        c=$(basename "$net" .net)
        (cd "$DIR" && $TIMEOUT "$NETC" --check "$c.net" >"$WORK/stdout" 2>"$WORK/stderr")
        rc=$?
        if [ "$rc" -ne 1 ] || [ -s "$WORK/stdout" ]; then
            echo "warning: $c.net: netc --check exited $rc (not 1)" \
                 "or wrote to stdout; $c.err written anyway" >&2
        fi
        cp "$WORK/stderr" "$DIR/$c.err" || exit 99
        n=$((n + 1))
    done
    echo "errors: regenerated $n .err files in $DIR; review them with git diff"
    exit 0
elif [ $# -gt 0 ]; then
    echo "usage: sh tests/errors.sh [--regen]" >&2
    exit 99
fi

# ----------------------------------------------------------------- checks

# netc_in_dir OUT ARGS...: runs netc ARGS in tests/errors, under the time
# limit and with TMPDIR=$WORK/tmp; OUT.stdout and OUT.stderr get its
# output, $rc its exit status.
netc_in_dir() {
    out=$1
    shift
    (cd "$DIR" && TMPDIR="$WORK/tmp" $TIMEOUT "$NETC" "$@" >"$out.stdout" 2>"$out.stderr")
    rc=$?
}

# same EXPECTED GOT: true if the files are equal, else shows the diff.
same() {
    cmp -s "$1" "$2" && return 0
    diff -u "$1" "$2" >&2
    return 1
}

# gcc_style FILE.net STDERR: true if STDERR is a well-formed set of
# diagnostics for FILE.net (see the header), else says which line is not.
gcc_style() {
    awk -v f="$1" '
        function bad(msg) {
            printf "%s: stderr line %d: %s\n    %s\n", f, NR, msg, $0
            ok = 0
        }
        BEGIN { ok = 1; errors = 0; count = -1; want = "" }
        # After a located error: its source line, then the caret line.
        want == "source" {
            if ($0 !~ /^ *[0-9]+ \| / || $1 + 0 != line)
                bad("expected the text of line " line " after the error")
            text = substr($0, 9)
            want = "caret"
            next
        }
        want == "caret" {
            want = ""
            if ($0 !~ /^      \| [ \t]*\^~*$/) {
                bad("expected a caret line")
                next
            }
            # COL counts bytes; on the screen a UTF-8 character is one column
            shown = 1
            for (i = 1; i < col; i++) {
                c = substr(text, i, 1)
                if (c < "\200" || c > "\277")
                    shown++
            }
            if (index($0, "^") - 9 + 1 != shown)
                bad("the caret is not under column " col)
            next
        }
        count >= 0 { bad("text after the error count") ; next }
        index($0, f ": error: ") == 1 { errors++; next }
        index($0, f ":") == 1 {
            rest = substr($0, length(f) + 2)
            if (rest !~ /^[1-9][0-9]*:[1-9][0-9]*: (error|note): ./) {
                bad("not " f ":LINE:COL: error|note: with LINE and COL from 1")
                errors += index(rest, " error: ") > 0
                next
            }
            split(rest, part, ":")
            if (rest ~ /^[^ ]* error: /) {
                errors++
                line = part[1] + 0
                col = part[2] + 0
                want = "source"
            } else if (errors == 0) {
                bad("a note before any error")
            }
            next
        }
        /^[0-9]+ errors$/ { count = $1 + 0; next }
        { bad("not part of a diagnostic") }
        END {
            if (want != "")
                bad("the last error has no source line or caret")
            if (errors == 0)
                bad("no error at all")
            if (errors > 1 && count != errors)
                bad("expected a last line \"" errors " errors\"")
            if (errors == 1 && count >= 0)
                bad("an error count after a single error")
            exit !ok
        }' "$2" >&2
}

for net in "$DIR"/*.net; do
    c=$(basename "$net" .net)
    if [ ! -f "$DIR/$c.err" ]; then
        check false "$c.net: no $c.err (write it with: sh tests/errors.sh --regen)"
        continue
    fi

    netc_in_dir "$WORK/check" --check "$c.net"
    check '[ "$rc" -ne 124 ]' "$c.net: netc --check ran past 10 s"
    check '[ "$rc" -eq 1 ]' "$c.net: netc --check exited $rc, not 1"
    check '[ ! -s "$WORK/check.stdout" ]' "$c.net: netc --check wrote to stdout"
    check 'same "$DIR/$c.err" "$WORK/check.stderr"' \
          "$c.net: stderr differs from $c.err (diff above: expected, got)"
    check 'gcc_style "$c.net" "$WORK/check.stderr"' \
          "$c.net: the messages are not gcc-style (see above)"

    rm -f "$WORK/out"
    netc_in_dir "$WORK/build" -o "$WORK/out" "$c.net"
    check '[ "$rc" -ne 124 ]' "$c.net: netc -o ran past 10 s"
    check '[ "$rc" -eq 1 ]' "$c.net: netc -o exited $rc, not 1"
    check '[ ! -e "$WORK/out" ]' "$c.net: netc -o wrote $WORK/out despite the errors"
    check 'cmp -s "$WORK/check.stderr" "$WORK/build.stderr"' \
          "$c.net: netc -o and netc --check print different messages"
    check '[ -z "$(ls -A "$WORK/tmp")" ]' \
          "$c.net: netc -o left temporary files: $(ls -A "$WORK/tmp" | tr '\n' ' ')"
    rm -rf "$WORK/tmp"/* "$WORK/tmp"/.[!.]* 2>/dev/null
    ls -A "$WORK" | grep -q '^out\.' &&
        check false "$c.net: netc -o left $(ls -d "$WORK"/out.*)"
done

finish
