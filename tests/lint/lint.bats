#!/usr/bin/env bats
# lint.bats: tools/lint-tests.py, which `make test` runs over tests/, refuses
# the checks bash's `set -e` ignores and nothing else; and tests/ passes it.

LINT=$BATS_TEST_DIRNAME/../../tools/lint-tests.py

# flagged SNIPPET LINE...: the lint refuses SNIPPET (a bats file) at exactly
# the LINEs given.
flagged() {
	local f=$BATS_TEST_TMPDIR/t.bats got want

	printf '%s\n' "$1" >"$f"
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

@test "a negated command in a test is refused, in the middle or at the end, alone or in a pipeline" {
	flagged '@test "x" {
	! grep -q a f
	echo after
	! tail f | grep b
}' 2 4
}

@test "an && list in a test is refused, on one line or continued on the next" {
	flagged '@test "x" {
	[ "$a" = 1 ] && [ "$b" = 2 ]
	mkdir d &&
		touch d/f
	lib_conn p1 && expect_held 1 0
	f && ! g
}' 2 3 5 6
}

@test "an && list inside a group, a loop or an if's branch is refused" {
	flagged '@test "x" {
	[[ -n $x ]] || { start && wait_for 2; }
	for i in 1 2; do
		grep -q "$i" f && grep -q x f
	done
	if true; then
		a && b
	else
		! c
	fi
	while read -r l; do
		case $l in
		a) x && y ;;
		*) ! z ;;
		esac
	done <f
}' 2 4 7 9 13 14
}

@test "setup and teardown are judged as tests: their last statement too" {
	flagged 'setup() {
	a && b
}
teardown() {
	[[ -n $PID ]] && kill "$PID"
}' 2 5
}

@test "a helper's last statement is its status, which its caller checks; the ones before are not" {
	flagged 'helper() {
	expect_eq a 1 1 && expect_eq b 2 2
}
other() {
	! grep -q x f
}
third() {
	! grep -q x f
	echo more
}' 8
}

@test "checks set -e sees are accepted: ||, conditions, run !, [[ && ]], control flow after &&, quoted and substituted &&" {
	flagged '@test "x" {
	! grep -q a f || { echo "found a" >&2; return 1; }
	a && b || fail "a or b"
	if ! grep -q a f && [ -s g ]; then echo; fi
	while ! ready && ((n++ < 5)); do sleep 1; done
	until a && b; do :; done
	run ! grep -q a f
	[[ -n $a && $b == 2 ]]
	(( a > 0 && b > 0 ))
	x=$(a && b)
	awk "NR > 1 && /x/" f
	echo "a && b" '\''! c'\''
	((n > 3)) && break
	[[ $t == light ]] && per=8
	((t >= b)) && { t=$b; f=0; }
	found && { echo "still there" >&2; return 1; }
	[[ -n $E2E_SKIP ]] && skip "$E2E_SKIP"
	(cd d && make)
	cat <<EOT
a && b
! c
EOT
	# a comment: a && b, ! c
}'
}
