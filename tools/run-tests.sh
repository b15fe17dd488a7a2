#!/usr/bin/env bash
# Runs every test suite and ends with one line "N passed, N failed, N skipped"
# summing them all ("N failed (M did not run)" when a file stopped before
# the end of its plan).  Exits non-zero when anything failed.  Output of a
# test is shown only when it fails.
#   tools/run-tests.sh [BUILD_DIR] [SUITE...]  suites: lint unit bpf lua pkg e2e
# RLGATE_E2E_FILES (names of tests/e2e files, space-separated, e.g.
# "fleet.bats chaos.bats") runs only those of the e2e suite;
# RLGATE_UNIT_TIMEOUT (seconds, default 120) bounds each unit test program.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
[[ $build == /* ]] || build="$top/$build"
suites=("$@")
((${#suites[@]})) || suites=(lint unit bpf lua pkg e2e)
export RLGATE_BUILD=$build
export RLGATE_TOP=$top

pass=0 fail=0 skip=0 lost=0

# Reads TAP on stdin, counts it, echoes diagnostics of failed tests.
tally_tap() {
	local suite=$1 line in_fail=0 p=0 f=0 s=0 l=0
	while IFS= read -r line; do
		case "$line" in
		"not ok "*"# did not run"*)
			f=$((f + 1)); in_fail=1; l=$((l + 1))
			echo "$suite: ${line#not ok }" >>"$tmp/failed"
			echo "FAIL [$suite] ${line#not ok }" ;;
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
	echo "[$suite] $p passed, $f failed$( ((l)) && echo " ($l did not run)"), $s skipped"
	echo "$p $f $s $l" >"$tmp/$suite.count"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Each unit test program prints a TAP line per test function (tests/unit
# check.c): they are numbered on here, prefixed with the program's name, with
# the diagnostics that follow them.  A program that printed none, or that
# failed other than by a failed test (a crash, a check outside of a test),
# is a line of its own.
unit_tap() {
	local n=0 t rc prog line tap failed

	for t in "$build"/tests/unit/test_*; do
		[[ -x $t ]] || continue
		prog=$(basename "$t")
		timeout "${RLGATE_UNIT_TIMEOUT:-120}" "$t" >"$tmp/unit.out" 2>&1
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
		done <"$tmp/unit.out"
		case $rc in
		0) ((tap)) || echo "ok $((n += 1)) - $prog" ;;
		77) ((tap)) || echo "ok $((n += 1)) - $prog # skip $(tail -n1 "$tmp/unit.out")" ;;
		*)
			# exit 1 after a failed test says nothing more
			((failed && rc == 1)) && continue
			echo "not ok $((n += 1)) - $prog (exit $rc)"
			sed 's/^/# /' "$tmp/unit.out" | tail -n 40 ;;
		esac
	done
}

# lint_tap: tools/lint-tests.py over tests/ as one test: a check that
# bash's set -e ignores fails it, whatever file it is in.
lint_tap() {
	local out rc=0

	out=$("$top/tools/lint-tests.py" "$top/tests" 2>&1) || rc=$?
	if ((rc == 0)); then
		echo "ok 1 - tools/lint-tests.py: every check in tests/ can fail"
	else
		echo "not ok 1 - tools/lint-tests.py refuses checks in tests/ (exit $rc)"
		sed 's/^/# /' <<<"$out"
	fi
}

bpf_tap() {
	local rc=0

	if [[ ! -x $build/tests/test_xdp ]]; then
		echo "not ok 1 - test_xdp was not built"
		return
	fi
	timeout 900 "$build/tests/test_xdp" >"$tmp/bpf.out" 2>&1 || rc=$?
	grep -E '^(ok|not ok|#)' "$tmp/bpf.out"
	# killed (the timeout) or failed with no failed test line: the tests
	# it did not reach would otherwise go unnoticed
	((rc == 0)) || grep -q '^not ok' "$tmp/bpf.out" ||
		echo "not ok $(($(grep -c '^ok' "$tmp/bpf.out") + 1)) - test_xdp exited $rc"
}

# bats_tap FILE: runs one bats file and prints its TAP, then a failed test
# for what the TAP does not account for: each test of the plan that never
# reported (the file aborted, or bats was killed), marked "# did not run";
# a file that printed no plan; and bats exiting non-zero with no failed
# test (an error outside of the tests, such as a failed teardown_file).
bats_tap() {
	local f=$1 name out rc=0 plan ran failed i

	name=${f#"$top"/tests/}
	out=$(mktemp "$tmp/bats.XXXXXX")
	bats --tap "$f" >"$out" 2>&1 || rc=$?
	cat "$out"
	plan=$(sed -nE '0,/^1\.\.([0-9]+)$/s//\1/p' "$out")
	ran=$(grep -cE '^(not )?ok [0-9]+' "$out")
	failed=$(grep -cE '^not ok [0-9]+' "$out")
	rm -f "$out"
	if [[ -z $plan ]]; then
		echo "not ok $((ran + 1)) $name printed no plan (bats exited $rc)"
		return
	fi
	for ((i = ran + 1; i <= plan; i++)); do
		echo "not ok $i $name: test $i of $plan # did not run (bats exited $rc after $ran)"
	done
	if ((rc != 0 && failed == 0 && ran >= plan)); then
		echo "not ok $((plan + 1)) $name: bats exited $rc with no failed test"
	fi
}

# run_item ITEM: runs one piece of work - the unit or bpf suite, a whole lua
# or pkg suite, or one e2e file - with its TAP left in $tmp/tap/ITEM (slashes
# made dashes) and its time in $tmp/times.
run_item() {
	local item=$1 t0=$SECONDS out f
	out=$tmp/tap/${item//\//-}

	case $item in
	unit) unit_tap >"$out" ;;
	bpf) bpf_tap >"$out" ;;
	lint)
		{
			lint_tap
			for f in "$top/tests/$item"/*.bats; do
				if [[ -e $f ]]; then bats_tap "$f"; fi
			done
		} >"$out" ;;
	lua | pkg)
		for f in "$top/tests/$item"/*.bats; do
			if [[ -e $f ]]; then bats_tap "$f"; fi
		done >"$out" ;;
	*) bats_tap "$top/tests/$item" >"$out" ;;
	esac
	echo "$((SECONDS - t0)) $item" >>"$tmp/times"
}

# running PID...: whether any of the PIDs is a job of this shell that still
# runs (not merely a process with that number: numbers are reused).
running() {
	local p live

	live=" $(jobs -pr | tr '\n' ' ')"
	for p in "$@"; do
		[[ $live == *" $p "* ]] && return 0
	done
	return 1
}

# run_pool JOBS: run_item for every item of BUSY, ALONE and SHARED, JOBS at
# a time, each list in its order: BUSY first, then one of ALONE at a time
# once no item of BUSY runs, and SHARED beside them.
run_pool() {
	local jobs=$1 b=0 a=0 s=0 alone='' busy=()

	while ((b < ${#BUSY[@]} || a < ${#ALONE[@]} || s < ${#SHARED[@]})); do
		while (($(jobs -pr | wc -l) >= jobs)); do
			wait -n
		done
		if ((b < ${#BUSY[@]})); then
			run_item "${BUSY[b]}" &
			busy+=($!) b=$((b + 1))
		elif ((a < ${#ALONE[@]})) && ! running "${busy[@]}" $alone; then
			run_item "${ALONE[a]}" &
			alone=$! a=$((a + 1))
		elif ((s < ${#SHARED[@]})); then
			run_item "${SHARED[s]}" &
			s=$((s + 1))
		else
			wait -n	# what is left waits for what runs
		fi
	done
	wait
}

# e2e_wanted FILE: FILE is one of RLGATE_E2E_FILES (every file when unset).
e2e_wanted() {
	[[ -z ${RLGATE_E2E_FILES:-} || " $RLGATE_E2E_FILES " == *" $(basename "$1") "* ]]
}

# bats_files SUITE: the suite's bats files, largest first.
bats_files() {
	local files f

	files=$(ls "$top/tests/$1"/*.bats 2>/dev/null) || return 0
	# shellcheck disable=SC2086
	for f in $(ls -S $files); do
		[[ $1 != e2e ]] || e2e_wanted "$f" && echo "$f"
	done
}

# tally_bats SUITE: one TAP stream of the suite's files, in file order.
tally_bats() {
	local suite=$1 f tap

	if [[ -z $(bats_files "$suite") ]]; then
		echo "[$suite] no tests"
		echo "0 0 0" >"$tmp/$suite.count"
		return
	fi
	if [[ $suite != e2e ]]; then
		tally_tap "$suite" <"$tmp/tap/$suite"
		return
	fi
	for f in "$top/tests/e2e"/*.bats; do
		e2e_wanted "$f" || continue
		tap=$tmp/tap/e2e-$(basename "$f")
		cat "$tap" 2>/dev/null || echo "not ok 1 - $(basename "$f") # did not run at all"
	done | tally_tap e2e
}

# What runs beside what: RLGATE_TEST_JOBS (default 2) pieces of work at
# once.  First the C, Lua, packaging and lint suites, the largest first, which
# keep the CPU busy; then the e2e files that measure fleet-mode leasing
# under load (several agents and Redis, deadlines below a second), one at a
# time and never beside those suites.  The e2e files whose header says
# "# e2e: parallel" (their checks are states and exact counts, or follow one
# kernel's token bucket) fill the other places meanwhile, the largest
# first.  Last, with nothing beside them, the files whose header says
# "# e2e: solo" (they time the load generator itself).  Each e2e file
# builds its own lab of namespaces, pins and servers, named for its
# process.
for s in "${suites[@]}"; do
	case $s in
	lint | unit | bpf | lua | pkg | e2e) ;;
	*) echo "unknown suite '$s' (expected lint, unit, bpf, lua, pkg or e2e)" >&2; exit 2 ;;
	esac
done
for f in ${RLGATE_E2E_FILES:-}; do
	[[ -e $top/tests/e2e/$f ]] ||
		{ echo "RLGATE_E2E_FILES names '$f', which is not in tests/e2e" >&2; exit 2; }
done
jobs=${RLGATE_TEST_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] ||
	{ echo "RLGATE_TEST_JOBS must be a positive number, not '$jobs'" >&2; exit 2; }
mkdir -p "$tmp/tap"
BUSY=() SHARED=() ALONE=() SOLO=()
for s in bpf pkg lua unit lint; do	# their usual order of size
	[[ " ${suites[*]} " == *" $s "* ]] && BUSY+=("$s")
done
if [[ " ${suites[*]} " == *" e2e "* ]]; then
	for f in $(bats_files e2e); do
		if grep -q '^# e2e: parallel' "$f"; then
			SHARED+=("e2e/$(basename "$f")")
		elif grep -q '^# e2e: solo' "$f"; then
			SOLO+=("e2e/$(basename "$f")")
		else
			ALONE+=("e2e/$(basename "$f")")
		fi
	done
fi
run_pool "$jobs"
for f in "${SOLO[@]}"; do
	run_item "$f"
done

for s in "${suites[@]}"; do
	case $s in
	unit | bpf) tally_tap "$s" <"$tmp/tap/$s" ;;
	*) tally_bats "$s" ;;
	esac
	read -r p f k l <"$tmp/$s.count"
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k)); lost=$((lost + l))
done

if ((fail)); then
	echo
	echo "Failed:"
	sed 's/^/  /' "$tmp/failed"
fi
if [[ -s $tmp/times ]]; then
	echo
	echo "Slowest files and suites (seconds):"
	sort -rn "$tmp/times" | head -n 8 | sed 's/^/  /'
fi
echo "$pass passed, $fail failed$( ((lost)) && echo " ($lost did not run)"), $skip skipped"
((fail == 0))
