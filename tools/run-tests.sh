#!/usr/bin/env bash
# Runs every test suite and ends with one line "N passed, N failed, N skipped"
# summing them all.  Exits non-zero when anything failed.  Output of a test is
# shown only when it fails.
#   tools/run-tests.sh [BUILD_DIR] [SUITE...]     suites: unit bpf lua pkg e2e
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
[[ $build == /* ]] || build="$top/$build"
suites=("$@")
((${#suites[@]})) || suites=(unit bpf lua pkg e2e)
export RLGATE_BUILD=$build
export RLGATE_TOP=$top

pass=0 fail=0 skip=0

# Reads TAP on stdin, counts it, echoes diagnostics of failed tests.
tally_tap() {
	local suite=$1 line in_fail=0 p=0 f=0 s=0
	while IFS= read -r line; do
		case "$line" in
		"not ok "*)
			f=$((f + 1)); in_fail=1
			echo "$suite: ${line#not ok }" >>"$tmp/failed"
			echo "FAIL [$suite] ${line#not ok }" ;;
		"ok "*"# skip"* | "ok "*"# SKIP"*)
			s=$((s + 1)); in_fail=0 ;;
		"ok "*)
			p=$((p + 1)); in_fail=0 ;;
		"#"*)
			((in_fail)) && echo "    $line" ;;
		*)
			((in_fail)) && echo "    $line" ;;
		esac
	done
	echo "[$suite] $p passed, $f failed, $s skipped"
	echo "$p $f $s" >"$tmp/$suite.count"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Each unit test program prints a TAP line per test function (tests/unit
# check.c): they are numbered on here, prefixed with the program's name, with
# the diagnostics that follow them.  A program that printed none, or that
# failed other than by a failed test (a crash, a check outside of a test),
# is a line of its own.
run_unit() {
	local n=0 t rc prog line tap failed
	{
		for t in "$build"/tests/unit/test_*; do
			[[ -x $t ]] || continue
			prog=$(basename "$t")
			timeout 120 "$t" >"$tmp/out" 2>&1
			rc=$?
			tap=0 failed=0
			while IFS= read -r line; do
				if [[ $line =~ ^(not )?ok\ [0-9]+\ -\ (.*)$ ]]; then
					n=$((n + 1)) tap=1
					[[ -n ${BASH_REMATCH[1]} ]] && failed=1
					echo "${BASH_REMATCH[1]}ok $n - $prog: ${BASH_REMATCH[2]}"
				elif [[ $line == "#"* ]]; then
					echo "$line"
				fi
			done <"$tmp/out"
			case $rc in
			0) ((tap)) || echo "ok $((n += 1)) - $prog" ;;
			77) ((tap)) || echo "ok $((n += 1)) - $prog # skip $(tail -n1 "$tmp/out")" ;;
			*)
				# exit 1 after a failed test says nothing more
				((failed && rc == 1)) && continue
				echo "not ok $((n += 1)) - $prog (exit $rc)"
				sed 's/^/# /' "$tmp/out" | tail -n 40 ;;
			esac
		done
	} | tally_tap unit
}

run_bpf() {
	if [[ ! -x $build/tests/test_xdp ]]; then
		echo "not ok 1 - test_xdp was not built" | tally_tap bpf
		return
	fi
	{ timeout 300 "$build/tests/test_xdp" 2>&1 || echo "# test_xdp exited $?"; } |
		grep -E '^(ok|not ok|#)' | tally_tap bpf
}

run_bats() {
	local suite=$1 dir=$top/tests/$1 files
	files=$(ls "$dir"/*.bats 2>/dev/null)
	if [[ -z $files ]]; then
		echo "[$suite] no tests"
		echo "0 0 0" >"$tmp/$suite.count"
		return
	fi
	# One bats run per file, timed: the slowest files are listed at the end,
	# where the suite's time goes.  e2e files run RLGATE_TEST_JOBS at a time
	# (default 1; each builds its own lab of namespaces, pins and servers, and
	# asserts counts and bounds, not speed), the largest first; their output
	# is tallied in file order once all are done.
	local jobs=1 f
	[[ $suite == e2e ]] && jobs=${RLGATE_TEST_JOBS:-1}
	[[ $jobs =~ ^[1-9][0-9]*$ ]] ||
		{ echo "RLGATE_TEST_JOBS must be a positive number, not '$jobs'" >&2; exit 2; }
	mkdir -p "$tmp/$suite"
	# shellcheck disable=SC2086
	ls -S $files | xargs -P "$jobs" -I{} bash -c '
		t0=$SECONDS
		bats --tap "$1" >"$2/$(basename "$1").tap" 2>&1
		echo "$((SECONDS - t0)) $3/$(basename "$1")" >>"$4"
	' _ {} "$tmp/$suite" "$suite" "$tmp/times"
	for f in $files; do
		cat "$tmp/$suite/$(basename "$f").tap" 2>/dev/null ||
			echo "not ok 1 - $(basename "$f") did not run"
	done | tally_tap "$suite"
}

for s in "${suites[@]}"; do
	case $s in
	unit) run_unit ;;
	bpf) run_bpf ;;
	lua | pkg | e2e) run_bats "$s" ;;
	*) echo "unknown suite '$s' (expected unit, bpf, lua, pkg or e2e)" >&2; exit 2 ;;
	esac
	read -r p f k <"$tmp/$s.count"
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
done

if ((fail)); then
	echo
	echo "Failed:"
	sed 's/^/  /' "$tmp/failed"
fi
if [[ -s $tmp/times ]]; then
	echo
	echo "Slowest files (seconds):"
	sort -rn "$tmp/times" | head -n 8 | sed 's/^/  /'
fi
echo "$pass passed, $fail failed, $skip skipped"
((fail == 0))
