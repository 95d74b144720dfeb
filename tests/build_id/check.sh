#!/usr/bin/env bash
# The build id follows the sources at build time: a scratch CMake project
# uses cmake/BuildId.cmake on a copy of the codegen folders, and the test
# edits a source between two `cmake --build` runs.
#   check.sh SOURCE_DIR BUILD_DIR GENERATOR VERSION LLVM_VERSION DIR...
set -euo pipefail
src=$1 bld=$2 gen=$3 ver=$4 llvm=$5
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
dirs=""
for d in "$@"; do
	cp -r "$d" "$tmp/src/"
	dirs="$dirs \${CMAKE_SOURCE_DIR}/$(basename "$d")"
done
cat >"$tmp/src/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(build_id_check C)
include($src/cmake/BuildId.cmake)
kc_build_id(\${CMAKE_BINARY_DIR}/build_id.h "$ver" "$llvm" $dirs)
add_executable(show show.c)
target_include_directories(show PRIVATE \${CMAKE_BINARY_DIR})
add_dependencies(show kc_build_id)
CM
printf '#include <stdio.h>\n#include "build_id.h"\nint main(void) { puts(KCSD_BUILD_ID); return 0; }\n' \
	>"$tmp/src/show.c"

fail() { echo "FAIL: $*"; exit 1; }
build() { cmake --build "$tmp/b" >/dev/null; "$tmp/b/show"; }
cmake -S "$tmp/src" -B "$tmp/b" -G "$gen" >/dev/null

id0=$(build)
real=$(sed -n 's/^#define KCSD_BUILD_ID "\(.*\)"$/\1/p' "$bld/generated/build_id.h")
[ "$id0" = "$real" ] || fail "copy of the sources hashes to $id0, the build has $real"
echo "ok: the copy's id equals this build's ($id0)"

[ "$(build)" = "$id0" ] || fail "a rebuild without edits changed the id"
echo "ok: a rebuild without edits keeps it"

first=$(find "$tmp/src/$(basename "$1")" -name '*.c' | sort | head -1)
cp "$first" "$tmp/orig"
echo "/* an edit */" >>"$first"
id1=$(build)
[ "$id1" != "$id0" ] || fail "editing $(basename "$first") left the id at $id0"
echo "ok: editing $(basename "$first") then cmake --build: $id0 -> $id1"

cp "$tmp/orig" "$first"
[ "$(build)" = "$id0" ] || fail "undoing the edit did not restore $id0"
echo "ok: undoing the edit restores it"

echo "/* new */" >"$(dirname "$first")/zz_new_file.h"
id2=$(build)
[ "$id2" != "$id0" ] || fail "adding a header left the id unchanged"
echo "ok: adding a header changes it ($id2)"
echo "1 passed, 0 failed"
