#!/bin/sh
# text2c.sh NAME FILE: FILE's text as the C string NAME (const char NAME[]),
# one source line a line, to embed a header in the runtime library.
# (sed, not awk: awks disagree on backslashes in gsub's replacement, and
# one that doubles them twice breaks every line continuation.)
set -e
name=$1
file=$2
tab=$(printf '\t')
echo "/* Generated from $(basename "$file") by scripts/text2c.sh. Do not edit. */"
echo "const char $name[] ="
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e "s/$tab/\\\\t/g" -e 's/^/    "/' -e 's/$/\\n"/' "$file"
echo "    \"\";"
