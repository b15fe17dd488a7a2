#!/usr/bin/env bats
# lint.bats: tools/lint-tests.py, which `make test` runs over tests/, refuses
# the checks bash's `set -e` ignores and nothing else; and tests/ passes it.

LINT=$BATS_TEST_DIRNAME/../../tools/lint-tests.py

# flagged CASE LINE...: the lint refuses cases/CASE.snippet (a bats file,
# kept apart so that no reader takes its checks for this file's own) at
# exactly the LINEs given.
flagged() {
	local f=$BATS_TEST_TMPDIR/t.bats got want

	cp "$BATS_TEST_DIRNAME/cases/$1.snippet" "$f"
	shift
	got=$("$LINT" "$f" | sed -E 's/^[^:]*:([0-9]+):.*/\1/' | paste -sd' ') || true
	want=$*
	[[ $got == "$want" ]] || {
		echo "lines flagged: '$got', expected '$want', in:" >&2
		cat -n "$f" >&2
		"$LINT" "$f" >&2
		return 1
	}
}

@test "tests/ has no check that set -e ignores" {
	run "$LINT" "$BATS_TEST_DIRNAME/.."
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "a negated command in a test is refused, in the middle or at the end, alone, in a pipeline or guarded by ||" {
	flagged negated 2 4 5
}

@test "an && list in a test is refused, on one line or continued on the next" {
	flagged and_list 2 3 5 6
}

@test "an && list inside a group, a loop or an if's branch is refused" {
	flagged nested 2 4 7 9 13 14
}

@test "setup and teardown are judged as tests: their last statement too" {
	flagged setup_teardown 2 5
}

@test "a helper's last statement is its status, which its caller checks; the ones before are not" {
	flagged helper_last 8
}

@test "checks set -e sees are accepted: ||, conditions, run !, [[ && ]], control flow after &&, quoted and substituted &&" {
	flagged accepted
}
