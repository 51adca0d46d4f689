#!/bin/sh
# text2c.sh NAME FILE: FILE's text as the C string NAME (const char NAME[]),
# one source line a line, to embed a header in the runtime library.
set -e
name=$1
file=$2
echo "/* Generated from $(basename "$file") by scripts/text2c.sh. Do not edit. */"
echo "const char $name[] ="
awk '{ gsub(/\\/, "\\\\\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); printf "    \"%s\\n\"\n", $0 }' "$file"
echo "    \"\";"
