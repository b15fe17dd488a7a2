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

run_unit() {
	local n=0 t rc
	{
		for t in "$build"/tests/unit/test_*; do
			[[ -x $t ]] || continue
			n=$((n + 1))
			timeout 120 "$t" >"$tmp/out" 2>&1
			rc=$?
			case $rc in
			0) echo "ok $n - $(basename "$t")" ;;
			77) echo "ok $n - $(basename "$t") # skip $(tail -n1 "$tmp/out")" ;;
			*) echo "not ok $n - $(basename "$t") (exit $rc)"
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
	# shellcheck disable=SC2086
	bats --tap $files 2>&1 | tally_tap "$suite"
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
echo "$pass passed, $fail failed, $skip skipped"
((fail == 0))
