#!/usr/bin/env bats
# expect.bats: the end-to-end suites' checks (tests/e2e/helpers.bash) fail on
# a value that could not be read - empty, null, nan - whatever the bounds,
# rather than reading it as 0.

load ../e2e/helpers

@test "expect_between: a number within the bounds passes, inclusive, integers and fractions" {
	expect_between "v" 0 0 5
	expect_between "v" 5 0 5
	expect_between "v" 2.5 0 5
	expect_between "v" -1 -2 0
	expect_between "v" 1e3 999 1000
	expect_between "v" .5 0 1
}

@test "expect_between: a number outside the bounds fails" {
	run expect_between "v" 6 0 5
	[ "$status" -eq 1 ]
	[[ $output == "v: got 6, expected between 0 and 5" ]]
	run expect_between "v" -0.1 0 5
	[ "$status" -eq 1 ]
}

@test "expect_between: a value that was not read (empty, null, nan, inf, text) fails with a lower bound of 0" {
	local v

	for v in "" null nan NaN -nan inf " " 0x10 3abc "1 2" - . e5; do
		run expect_between "v" "$v" 0 100
		[ "$status" -eq 1 ] || { echo "'$v' passed"; return 1; }
		[[ $output == *"is not a number"* ]] || { echo "'$v': $output"; return 1; }
	done
}

@test "expect_between: a bound that is not a number fails the check" {
	run expect_between "v" 3 "" 5
	[ "$status" -eq 1 ]
	run expect_between "v" 3 0 null
	[ "$status" -eq 1 ]
}

@test "expect_near: a value not read, or nothing to compare it with, fails; a near one passes" {
	expect_near "v" 100 100 5
	expect_near "v" 96 100 5
	run expect_near "v" "" 0 5
	[ "$status" -eq 1 ]
	run expect_near "v" null 100 5
	[ "$status" -eq 1 ]
	run expect_near "v" 100 "" 5
	[ "$status" -eq 1 ]
	run expect_near "v" 90 100 5
	[ "$status" -eq 1 ]
}

@test "expect_offered: a report that lacks its attempts or what was skipped fails" {
	expect_offered 100 '{"total": {"attempts": 99}, "skipped": 1}'
	run expect_offered 100 '{"total": {"attempts": 100}}'
	[ "$status" -eq 1 ]
	run expect_offered 100 '{"skipped": 0}'
	[ "$status" -eq 1 ]
	run expect_offered 100 '{"total": {"attempts": 90}, "skipped": 10}'
	[ "$status" -eq 1 ]
}
