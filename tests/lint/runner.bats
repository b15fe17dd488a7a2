#!/usr/bin/env bats
# runner.bats: tools/run-tests.sh counts what a bats file lost - the tests of
# its plan that never reported, a missing plan, a non-zero exit with no
# failed test - as failures, and its summary line says how many did not run.
# The runner is run on a tree of its own whose e2e "files" a stand-in bats
# replays: the first line is the exit status, the rest the TAP it prints.

setup() {
	TREE=$BATS_TEST_TMPDIR/tree
	mkdir -p "$TREE/tools" "$TREE/tests/e2e" "$BATS_TEST_TMPDIR/bin"
	cp "$BATS_TEST_DIRNAME/../../tools/run-tests.sh" "$TREE/tools/"
	cat >"$BATS_TEST_TMPDIR/bin/bats" <<'EOT'
#!/bin/sh
# the last argument is the file: its first line the exit status, then TAP
f=$(eval echo "\${$#}")
tail -n +2 "$f"
exit "$(head -n 1 "$f")"
EOT
	chmod +x "$BATS_TEST_TMPDIR/bin/bats"
}

# file NAME STATUS TAP...: a stand-in e2e file.
file() {
	local name=$1 rc=$2

	shift 2
	printf '%s\n' "$rc" "$@" >"$TREE/tests/e2e/$name.bats"
}

# runner: the copy of run-tests.sh on the e2e suite, its output in $output,
# its summary (last line) in $summary.
runner() {
	run env PATH="$BATS_TEST_TMPDIR/bin:$PATH" "$TREE/tools/run-tests.sh" "$TREE/build" e2e
	echo "$output"
	summary=${lines[-1]}
}

@test "files that ran their whole plan: passed, failed and skipped counted as reported, exit 0 only without a failure" {
	file a 0 '1..3' 'ok 1 one' 'ok 2 two' 'ok 3 three # skip no root'
	runner
	[ "$status" -eq 0 ]
	[ "$summary" = "2 passed, 0 failed, 1 skipped" ]
	file b 1 '1..2' 'ok 1 one' 'not ok 2 two' '# (in test file b.bats)'
	runner
	[ "$status" -eq 1 ]
	[ "$summary" = "3 passed, 1 failed, 1 skipped" ]
}

@test "a file that stopped after 1 of its 4 tests: the 3 that never reported are failures, named, and the summary says they did not run" {
	file a 0 '1..2' 'ok 1 one' 'ok 2 two'
	file stopped 1 '1..4' 'ok 1 first'
	runner
	[ "$status" -eq 1 ]
	[ "$summary" = "3 passed, 3 failed (3 did not run), 0 skipped" ]
	[[ $output == *"e2e/stopped.bats: test 4 of 4 # did not run (bats exited 1 after 1)"* ]]
	# killed: no status of its own, the TAP cut short
	file stopped 137 '1..4' 'ok 1 first' 'not ok 2 second'
	runner
	[ "$status" -eq 1 ]
	[ "$summary" = "3 passed, 3 failed (2 did not run), 0 skipped" ]
}

@test "a file with no plan, and one that exited non-zero with every test passed, each count as a failure" {
	file noplan 1 'bats: syntax error near line 3'
	file exited 1 '1..2' 'ok 1 one' 'ok 2 two' 'teardown_file failed'
	runner
	[ "$status" -eq 1 ]
	[ "$summary" = "2 passed, 2 failed, 0 skipped" ]
	[[ $output == *"e2e/noplan.bats printed no plan (bats exited 1)"* ]]
	[[ $output == *"e2e/exited.bats: bats exited 1 with no failed test"* ]]
}
