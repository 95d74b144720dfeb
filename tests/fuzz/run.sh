#!/bin/sh
# run.sh - build kcsd's libFuzzer targets with clang-19 and run each one
# for a bounded time (registered as the ctest test "fuzz", label slow).
#
# Usage: tests/fuzz/run.sh [--build-dir DIR] [--time SECONDS] [--jobs N]
#                          [--target parse|route]...
#
# 1. configures DIR (default ./build-fuzz) with CC=clang-19, -DKC_FUZZ=ON
#    and ASan+UBSan, and builds only fuzz_parse and fuzz_route;
# 2. replays every file of tests/fuzz/regressions/<target>/ (inputs that
#    once crashed; each must now pass);
# 3. fuzzes each target for SECONDS (default 60; -timeout=10 per input,
#    -rss_limit_mb=2048) from a temporary corpus seeded with
#    tests/fuzz/seeds/<target>/ and, for parse, ../shared/corpus/akg next
#    to the checkout when it exists (it is read, never copied).
# A crash leaves its input under DIR/artifacts/ and fails the run: add it to
# tests/fuzz/regressions/<target>/ once fixed. Exits 77 (ctest: skipped)
# when clang-19 or its libFuzzer runtime (libclang-rt-19-dev) is missing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$PWD/build-fuzz
secs=60
jobs=$(nproc 2>/dev/null || echo 2)
targets=""
while [ $# -gt 0 ]; do
	case $1 in
	--build-dir) build=$2; shift 2 ;;
	--time) secs=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--target) targets="$targets $2"; shift 2 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$targets" ] || targets="parse route"

cc=${KC_FUZZ_CC:-clang-19}
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "1..0 # SKIP $cc not installed"
	exit 77
fi
probe=$(mktemp -d "${TMPDIR:-/tmp}/kcsd-fuzzprobe.XXXXXX")
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
	rm -rf "$probe"
	echo "1..0 # SKIP $cc cannot link -fsanitize=fuzzer (install libclang-rt-19-dev)"
	exit 77
fi
rm -rf "$probe"

echo "# configure and build the fuzzers in $build"
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DKC_FUZZ=ON \
	-DKC_SANITIZE='address;undefined' -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.cmake.log" 2>&1 ||
	{ cat "$build.cmake.log"; echo "not ok - configure"; exit 1; }
tgts=""
for t in $targets; do tgts="$tgts fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $tgts >"$build/build.log" 2>&1 ||
	{ tail -50 "$build/build.log"; echo "not ok - build"; exit 1; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$src/tests/lsan.supp}"
mkdir -p "$build/artifacts"
n=0
failed=0
for t in $targets; do
	bin="$build/tests/fuzz_$t"
	[ -x "$bin" ] || bin=$(find "$build" -name "fuzz_$t" -type f -perm -u+x | head -1)

	n=$((n + 1))
	regs=$(find "$here/regressions/$t" -type f ! -name '.*' 2>/dev/null | sort)
	if [ -n "$regs" ]; then
		# shellcheck disable=SC2086
		if "$bin" -rss_limit_mb=2048 -timeout=10 $regs >"$build/regress_$t.log" 2>&1; then
			echo "ok $n - fuzz_$t replays $(echo "$regs" | wc -l) regression input(s)"
		else
			tail -40 "$build/regress_$t.log"
			echo "not ok $n - fuzz_$t regression inputs"
			failed=$((failed + 1))
		fi
	else
		echo "ok $n - fuzz_$t has no regression inputs # SKIP"
	fi

	n=$((n + 1))
	work=$(mktemp -d "${TMPDIR:-/tmp}/kcsd-fuzz-$t.XXXXXX")
	dirs="$work $here/seeds/$t"
	if [ "$t" = parse ] && [ -d "$src/../shared/corpus/akg" ]; then
		dirs="$dirs $src/../shared/corpus/akg"
	fi
	log="$build/fuzz_$t.log"
	# shellcheck disable=SC2086
	if "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" $dirs >"$log" 2>&1; then
		stats=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
		cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | grep -o 'cov: [0-9]*' || true)
		echo "ok $n - fuzz_$t ran ${secs}s: ${stats:-?} inputs, ${cov:-cov: ?}, no crash"
	else
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written|artifact_prefix' "$log" | head -20
		tail -30 "$log"
		echo "not ok $n - fuzz_$t found a crash (input under $build/artifacts/)"
		failed=$((failed + 1))
	fi
	rm -rf "$work"
done
echo "1..$n"
[ "$failed" -eq 0 ]
