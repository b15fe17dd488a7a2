#!/usr/bin/env bats
# A start that fails leaves nothing of its own behind and nothing of the
# operator's gone: the pin dir it made is removed, an empty one the
# operator made beforehand stays.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

@test "a start that fails on a missing interface removes the pin dir it made, and keeps the operator's empty one" {
	local rc

	rc=0
	agent_exec --iface nosuch0 --pin-dir "$PIN_DIR" --control "$CTL" \
		--state-dir "$STATE_DIR" >"$AGENT_LOG" 2>&1 || rc=$?
	expect_eq "exit status, pin dir made by the agent" "$rc" 1
	[[ ! -e $PIN_DIR ]] || { echo "the agent's pin dir left behind: $(ls -A "$PIN_DIR")" >&2; return 1; }

	mkdir "$PIN_DIR"
	rc=0
	agent_exec --iface nosuch0 --pin-dir "$PIN_DIR" --control "$CTL" \
		--state-dir "$STATE_DIR" >>"$AGENT_LOG" 2>&1 || rc=$?
	expect_eq "exit status, the operator's pin dir" "$rc" 1
	[[ -d $PIN_DIR ]] || { echo "the operator's empty pin dir was removed" >&2; return 1; }
	expect_eq "pins left in the operator's dir" "$(ls -A "$PIN_DIR" | wc -l)" 0
	grep -q "couldn't find interface on 'nosuch0'" "$AGENT_LOG" ||
		{ echo "no error naming the interface" >&2; return 1; }
}
