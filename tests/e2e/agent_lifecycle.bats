#!/usr/bin/env bats
# rlagent's life cycle on a real interface: enforcement outlives the agent
# (SIGTERM, SIGKILL), a restarted agent adopts the pins, `rlctl detach`
# removes program and pins, and a missing interface stops it at start.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

# restart_under_load SIGNAL: load at three times the limit for 6 s; at 1.5 s
# the agent gets SIGNAL, stays away for 1.5 s, then starts again.  The limit
# holds across the gap (no burst of admissions while no agent runs), and the
# new agent carries on with the pinned state: same tenants, counters that
# continue instead of starting from zero.
restart_under_load() {
	local sig=$1 out=$BATS_TEST_TMPDIR/load.json pid before tenants connected admitted

	agent_start
	rl tenant set rs --rate 50/s --burst 10 --match "$(prefixes c1)" --action rst
	tenants=$(tenants_json)
	loadgen_bg c1 "$out" --rate 150 --duration 6 "$(lab_target s1 "$PORT" 4)"
	pid=$LOADGEN_BG_PID
	sleep 1.5
	before=$(stat_get rs admitted)
	expect_between "admitted before SIG$sig" "$before" 1 1000

	agent_stop "$sig"
	[[ $sig != TERM ]] || expect_eq "exit status after SIGTERM" "$AGENT_RC" 0
	# no agent: the program and its pins stay
	xdp_attached || { echo "no XDP program on eth0 after SIG$sig" >&2; return 1; }
	[[ -e $PIN_DIR/tenants ]] || { echo "pins gone after SIG$sig: $(ls "$PIN_DIR" 2>&1)" >&2; return 1; }
	sleep 1.5

	agent_start
	loadgen_wait "$pid" "$out"
	connected=$(json_get .total.connected)
	expect_eq attempts "$(json_get .total.attempts)" 900
	expect_near "connected across the restart" "$connected" "$(expected 50 6 10)" 5

	expect_eq "tenants after the restart" "$(tenants_json)" "$tenants"
	admitted=$(stat_get rs admitted)
	expect_between "stats admitted after the restart (continued from $before)" \
		"$admitted" $((connected - 2)) $((connected + 2))
	grep -q 'adopted' "$AGENT_LOG" || { echo "restarted agent did not adopt the pins" >&2; return 1; }
}

@test "SIGTERM and restart under load: the limit holds across the gap, pins adopted, counters continue" {
	restart_under_load TERM
}

@test "SIGKILL and restart under load: the limit holds across the gap, pins adopted, counters continue" {
	restart_under_load KILL
}

# connect_c1 N: N connections from c1 in a second; CONNECTED is how many
# connected.  A statement of its own: in $(...) set -e would not see its
# checks.
connect_c1() {
	run_loadgen_json c1 --rate "$1" --duration 1 "$(lab_target s1 "$PORT" 4)" >/dev/null
	expect_eq "attempts" "$(json_get .total.attempts)" "$1"
	CONNECTED=$(json_get .total.connected)
}

@test "a restarted agent (SIGTERM, then SIGKILL) keeps the bucket the kernel holds: a burst spent before the restart is not given again" {
	local sig

	agent_start
	rl tenant set rb --rate 1/h --burst 10 --match "$(prefixes c1)" --action rst
	connect_c1 20
	expect_eq "connected of 20, burst 10" "$CONNECTED" 10
	for sig in TERM KILL; do
		agent_stop "$sig"
		agent_start
		connect_c1 5
		expect_eq "connected of 5 after SIG$sig and a restart" "$CONNECTED" 0
	done
	expect_eq "admitted" "$(stat_get rb admitted)" 10
	expect_eq "denied" "$(stat_get rb denied)" 20
}

@test "a second agent on the same pin dir is refused: exit 1, says another runs on it, and the first keeps its program, tenants and socket" {
	local prog tenants

	agent_start
	rl tenant set one --rate 10/s --burst 5 --match "$(prefixes c1)"
	prog=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].xdp.prog.id')
	[[ $prog =~ ^[0-9]+$ ]] || { echo "no XDP program id on eth0: '$prog'" >&2; return 1; }
	tenants=$(tenants_json)
	run agent_exec --iface eth0 --control "$CTL.2" --state-dir "$STATE_DIR.2" \
		--pin-dir "$PIN_DIR" --metrics 127.0.0.1:9465
	echo "$output"
	expect_eq "exit status of the second agent" "$status" 1
	[[ $output == *"couldn't lock pin dir on '$PIN_DIR': another rlagent is running on it"* ]] ||
		{ echo "the second agent does not say another runs on the pin dir" >&2; return 1; }
	[[ ! -e $CTL.2 ]] || { echo "the second agent left its control socket" >&2; return 1; }
	proc_running "$AGENT_PID" || { echo "the first agent is gone" >&2; return 1; }
	expect_eq "program on eth0" \
		"$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].xdp.prog.id')" "$prog"
	expect_eq "the first agent's tenants" "$(tenants_json)" "$tenants"
}

@test "rlctl detach removes the XDP program and the pins; the agent exits; traffic is no longer limited" {
	agent_start
	rl tenant set d --rate 1/h --burst 1 --match "$(prefixes c1)" --action rst
	run_loadgen_json c1 --rate 20 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_eq "connected while attached" "$(json_get .total.connected)" 1
	xdp_attached
	[[ -d $PIN_DIR ]]

	rl detach eth0
	agent_wait_exit 5
	expect_eq "agent exit status after the last detach" "$AGENT_RC" 0
	if xdp_attached; then
		echo "XDP program still on eth0 after detach:" >&2
		ip -n "$(lab_ns s1)" link show dev eth0 >&2
		return 1
	fi
	if [[ -e $PIN_DIR ]]; then
		echo "pin dir $PIN_DIR still there after detach: $(ls "$PIN_DIR")" >&2
		return 1
	fi
	run_loadgen_json c1 --rate 20 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_eq "connected after detach" "$(json_get .total.connected)" 20
}

@test "rlagent refuses a missing interface: clear message, exit 1, nothing attached or pinned" {
	run agent_exec --iface nosuch0 --control "$CTL" --state-dir "$STATE_DIR" --pin-dir "$PIN_DIR" \
		--metrics "$METRICS_ADDR"
	echo "$output"
	expect_eq "exit status (--iface nosuch0)" "$status" 1
	[[ $output == *"nosuch0"*"no such interface"* ]] ||
		{ echo "message does not name the interface and the problem" >&2; return 1; }
	[[ ! -e $PIN_DIR ]] || { echo "pin dir left behind" >&2; return 1; }
	[[ ! -e $CTL ]] || { echo "control socket left behind" >&2; return 1; }

	# a good interface next to the missing one is not left attached either
	run agent_exec --iface eth0,nosuch0 --control "$CTL" --state-dir "$STATE_DIR" --pin-dir "$PIN_DIR" \
		--metrics "$METRICS_ADDR"
	echo "$output"
	expect_eq "exit status (--iface eth0,nosuch0)" "$status" 1
	[[ $output == *"nosuch0"* ]] || { echo "message does not name nosuch0" >&2; return 1; }
	if xdp_attached; then
		echo "eth0 left with an XDP program" >&2
		return 1
	fi
	[[ ! -e $PIN_DIR ]] || { echo "pin dir left behind" >&2; return 1; }
}

@test "pins of an incompatible build: rlagent says which map and what to do, exits 1, touches nothing" {
	# a 'tenants' map as a build with another tenant layout would have pinned
	mkdir -p "$PIN_DIR"
	bpftool map create "$PIN_DIR/tenants" type array key 4 value 192 entries 4096 \
		name tenants flags 1024
	run agent_exec --iface eth0 --control "$CTL" --state-dir "$STATE_DIR" \
		--pin-dir "$PIN_DIR" --metrics "$METRICS_ADDR"
	echo "$output"
	expect_eq "exit status" "$status" 1
	[[ $output == *"$PIN_DIR/tenants"*"incompatible rlgate build"*"rlctl detach"* ]] ||
		{ echo "message does not name the map and the way out" >&2; return 1; }
	[[ -e $PIN_DIR/tenants ]] || { echo "the old pin was removed" >&2; return 1; }
	if xdp_attached; then
		echo "something was attached" >&2
		return 1
	fi
	rm -rf "$PIN_DIR"
}

@test "unsafe paths are refused, not followed: a non-socket at --control, state and control directories others may write in or own; new ones are 0700 and 0750, the socket 0660 in --control-group, --pin-dir gets its parents" {
	local d ctl2 state2 pins

	# something else at --control is left alone
	echo keep >"$CTL"
	run agent_exec --iface eth0 --control "$CTL" --state-dir "$STATE_DIR" --pin-dir "$PIN_DIR" \
		--metrics "$METRICS_ADDR"
	echo "$output"
	expect_eq "exit status (a file at --control)" "$status" 1
	[[ $output == *"'$CTL'"*"not a socket"* ]] ||
		{ echo "message does not name the path and the problem" >&2; return 1; }
	expect_eq "the file at --control" "$(cat "$CTL")" keep
	rm -f "$CTL"
	if xdp_attached; then
		echo "eth0 left with an XDP program" >&2
		return 1
	fi

	# directories that others may write in, or that others own
	for d in ww:0777 gw:0770 sticky:1777 owned:0755; do
		mkdir -m "${d#*:}" "$BATS_TEST_TMPDIR/${d%:*}"
	done
	chown nobody "$BATS_TEST_TMPDIR/owned"
	for d in ww gw sticky owned; do
		run agent_exec --iface eth0 --control "$CTL" --state-dir "$BATS_TEST_TMPDIR/$d" \
			--pin-dir "$PIN_DIR" --metrics "$METRICS_ADDR"
		echo "$output"
		expect_eq "exit status (state dir $d)" "$status" 1
		[[ $output == *"refusing directory '$BATS_TEST_TMPDIR/$d'"* ]] ||
			{ echo "message does not name the state dir $d" >&2; return 1; }
		run agent_exec --iface eth0 --control "$BATS_TEST_TMPDIR/$d/sock" \
			--state-dir "$STATE_DIR" --pin-dir "$PIN_DIR" --metrics "$METRICS_ADDR"
		echo "$output"
		expect_eq "exit status (control dir $d)" "$status" 1
		[[ $output == *"refusing directory '$BATS_TEST_TMPDIR/$d'"* ]] ||
			{ echo "message does not name the control dir $d" >&2; return 1; }
		[[ ! -e $BATS_TEST_TMPDIR/$d/sock ]] || { echo "socket made in $d" >&2; return 1; }
	done
	if xdp_attached; then
		echo "eth0 left with an XDP program" >&2
		return 1
	fi

	# fresh directories, parents and all
	ctl2=$BATS_TEST_TMPDIR/run/rlgate/sock
	state2=$BATS_TEST_TMPDIR/lib/rlgate
	pins=$PIN_DIR/site/rlgate	# the teardown removes $PIN_DIR and all in it
	rlagent_start s1 "$ctl2" "$state2" "$pins" "$AGENT_LOG" --control-group nogroup ||
		{ AGENT_PID=$RLAGENT_PID; return 1; }
	AGENT_PID=$RLAGENT_PID
	expect_eq "state dir mode" "$(stat -c %a "$state2")" 700
	expect_eq "control dir mode and group" "$(stat -c '%a %G' "$(dirname "$ctl2")")" "750 nogroup"
	expect_eq "socket type, mode and group" "$(stat -c '%F %a %G' "$ctl2")" "socket 660 nogroup"
	[[ -e $pins/tenants ]] || { echo "no pins under $pins" >&2; return 1; }
	"$RLGATE_BUILD/rlctl" --socket "$ctl2" tenant set web --rate 5/s --match 198.51.100.0/24 >/dev/null
	[[ (-s $state2/policy.json || -s $state2/policy.journal) && ! -e $state2/.policy.json.tmp ]] ||
		{ echo "state file missing or temporary left: $(ls -la "$state2")" >&2; return 1; }
	agent_stop TERM
}

@test "a new tenant, a change of its limits or prefixes and a deletion each go to the state file's journal; a restart after SIGKILL takes every change but a line cut short, and folds them into policy.json" {
	local j=$STATE_DIR/policy.journal

	agent_start
	rl tenant set jr --rate 50/s --burst 10 --match "$(prefixes c1)"
	rl tenant set other --rate 5/s --match 198.51.100.0/24
	rl tenant set gone --rate 5/s --match 198.51.100.0/25
	rl tenant del gone
	expect_eq "journal lines after 3 tenants and a deletion" "$(wc -l <"$j")" 4
	[[ ! -e $STATE_DIR/policy.json ]] ||
		{ echo "policy.json written for a change of one tenant" >&2; return 1; }
	rl tenant set jr --rate 60/s --burst 10 --match "$(prefixes c1)"
	rl tenant set jr --rate 70/s --burst 20 --match "$(prefixes c1)"
	expect_eq "journal lines" "$(wc -l <"$j")" 6
	# a change the agent never answered: cut short by the crash
	printf '{"version":99,"tenant":{"name":"jr","rate":"1/s"' >>"$j"
	agent_stop KILL
	agent_start
	expect_eq "jr after the restart" \
		"$(rl --json tenant get jr | jq -c '[.rate, .burst]')" '["70/s",20]'
	expect_eq "other after the restart" "$(rl --json tenant get other | jq -r .rate)" 5/s
	expect_eq "tenants after the restart" "$(rl --json tenant list | jq -c '[.[].name] | sort')" '["jr","other"]'
	[[ ! -e $j ]] || { echo "journal left after the restart: $(cat "$j")" >&2; return 1; }
	expect_eq "rate in policy.json after the restart" \
		"$(jq -r '.tenants[] | select(.name == "jr") | .rate' "$STATE_DIR/policy.json")" 70/s
	expect_eq "gone's tombstone in policy.json" \
		"$(jq -r '.deleted[].name' "$STATE_DIR/policy.json")" gone
	# a journal that ends well stays, and is read again
	rl tenant set jr --rate 80/s --burst 20 --match "$(prefixes c1)"
	agent_stop KILL
	agent_start
	expect_eq "jr after a second restart" "$(rl --json tenant get jr | jq -r .rate)" 80/s
	expect_eq "journal lines after a second restart" "$(wc -l <"$j")" 1
	# a change of prefixes and a deletion are lines too, read again
	rl tenant set jr --rate 70/s --burst 20 --match 203.0.113.0/24
	rl tenant del other
	expect_eq "journal lines after a change of prefixes and a deletion" "$(wc -l <"$j")" 3
	agent_stop KILL
	agent_start
	expect_eq "jr's prefixes after a third restart" "$(rl --json tenant get jr | jq -c .match)" '["203.0.113.0/24"]'
	expect_eq "tenants after a third restart" "$(rl --json tenant list | jq -c '[.[].name]')" '["jr"]'
}

@test "a restart reads every field of every tenant back as it was: policy.json as the agent writes it (a tenant a line), the same hand-edited into another layout, and the journal on top; a damaged tenant line quarantines the file instead of dropping the tenant" {
	local set=$BATS_TEST_TMPDIR/set.json p=$STATE_DIR/policy.json before

	jq -n --arg c1 "$(prefixes c1)" '{tenants: [
		{name: "plain", rate: "100/s", match: ($c1 | split(","))},
		{name: "every.field", rate: "1000/s", burst: 200, match: ["198.51.100.0/25",
		 "2001:db8:5::/48"], ports: [80, 443], action: "rst", shadow: true,
		 overshoot: 300, fail: "deny", max_conns: 50, per_source: "5/s",
		 per_source_burst: 7, source_mask: "/24,/48", verify: "syncookie", shards: 2},
		{name: "out_bound", rate: "30/m", match: ["203.0.113.0/24"], direction: "out",
		 fail: "allow"},
		{name: "hourly", rate: "3600/h", burst: 5, match: ["192.0.2.128/26"],
		 ports: [22], fail: "static"}]}' >"$set"
	agent_start
	rl apply "$set" >/dev/null
	rl tenant set later --rate 7/s --match 198.51.100.128/25 --action rst
	rl tenant set hourly --rate 120/m --burst 6 --match 192.0.2.128/26 --ports 22,2222
	expect_eq "the state file's head line" "$(head -n 1 "$p" | grep -c '"tenants":\[$')" 1
	before=$(tenants_json)
	expect_eq "tenants" "$(jq length <<<"$before")" 5

	agent_stop KILL
	agent_start
	expect_eq "tenants after a restart" "$(tenants_json)" "$before"

	# the same document laid out otherwise: read whole, the same tenants
	agent_stop TERM
	jq . "$p" >"$p.new"
	mv "$p.new" "$p"
	chmod 640 "$p"
	agent_start
	expect_eq "tenants from a pretty-printed policy.json" "$(tenants_json)" "$before"

	# one tenant line damaged in the agent's own layout
	rl apply "$set" >/dev/null
	agent_stop TERM
	sed -i 's/"rate":"30\/m"/"rate":"0\/m"/' "$p"
	grep -q '"rate":"0/m"' "$p" || { echo "no tenant line to damage in $p" >&2; return 1; }
	agent_start
	grep -q "couldn't read policy.*tenant 2" "$AGENT_LOG" ||
		{ echo "the damaged line was not reported:" >&2; tail -n 5 "$AGENT_LOG" >&2; return 1; }
	expect_eq "quarantined files" "$(find "$STATE_DIR" -name 'policy.json.bad.*' | wc -l)" 1
	expect_eq "tenants from a damaged policy.json" "$(rl --json tenant list | jq length)" 0
}

# tenant_set_json N [JQ]: N tenants t0..t(N-1) of their own /24 each, as
# `rlctl apply` takes them, then JQ applied to the set.
tenant_set_json() {
	jq -n --argjson n "$1" '{tenants: [range($n) as $i | {name: "t\($i)",
		rate: "\(10 + $i)/s", match: ["198.18.\($i).0/24"]}]}' | jq "${2:-.}"
}

@test "the state file written whole again holds every tenant as it is now: a line copied from the file before is never that of an older version, after changes in the journal, an apply, a restart and a rewrite when the journal is full" {
	local set=$BATS_TEST_TMPDIR/set.json p=$STATE_DIR/policy.json j=$STATE_DIR/policy.journal
	local v3 v5 want

	agent_start --log-level debug
	tenant_set_json 20 >"$set"
	rl apply "$set" >/dev/null
	# changes in the journal: t3's line and t5's in policy.json are stale
	rl tenant set t3 --rate 33/s --match 198.18.3.0/24
	rl tenant set t5 --rate 15/s --match 198.18.105.0/24
	rl tenant del t7
	rl tenant set n1 --rate 5/s --match 198.19.0.0/24
	v3=$(rl --json tenant get t3 | jq .version)
	v5=$(rl --json tenant get t5 | jq .version)
	# an apply of the set as it is now, but for t11: written whole
	tenant_set_json 20 '.tenants |= map(select(.name != "t7")) |
		(.tenants[] | select(.name == "t3") | .rate) = "33/s" |
		(.tenants[] | select(.name == "t5") | .match) = ["198.18.105.0/24"] |
		(.tenants[] | select(.name == "t11") | .rate) = "111/s" |
		.tenants += [{name: "n1", rate: "5/s", match: ["198.19.0.0/24"]}]' >"$set"
	rl apply "$set" >/dev/null
	# t3, t5, t11 and n1 encoded, the others copied
	expect_eq "lines copied" "$(grep -c "20 tenants (16 lines copied" "$AGENT_LOG")" 1
	expect_eq "t3's version kept by the apply" "$(rl --json tenant get t3 | jq .version)" "$v3"
	expect_eq "t5's version kept by the apply" "$(rl --json tenant get t5 | jq .version)" "$v5"
	[[ ! -e $j ]] || { echo "journal left after an apply: $(cat "$j")" >&2; return 1; }
	want=$(tenants_json)
	expect_eq "t3 in policy.json" "$(jq -c '.tenants[] | select(.name == "t3") | [.rate, .version]' "$p")" "[\"33/s\",$v3]"
	agent_stop KILL
	agent_start --log-level debug
	expect_eq "tenants after a restart" "$(tenants_json)" "$want"

	# a change in the journal, then a journal past its size at the next
	# start (lines older than policy.json are read and skipped): the next
	# change writes policy.json whole from the file that start read
	rl tenant set t12 --rate 12/s --match 198.18.12.0/24
	agent_stop KILL
	yes '{"version":1,"deleted":{"name":"old","version":1}}' | head -c 4300000 |
		head -n -1 >>"$j"
	echo '{"version":1,"deleted":{"name":"old","version":1}}' >>"$j"
	agent_start --log-level debug
	expect_eq "t12 after the journal's replay" "$(rl --json tenant get t12 | jq -r .rate)" 12/s
	rl tenant set t14 --rate 14/s --match 198.18.14.0/24
	# answered first (its line in the journal), then policy.json written
	expect_gone "journal folded into policy.json" "$j"
	# t12 and t14 encoded, the others copied from the file read at start
	expect_eq "lines copied" "$(grep -c "20 tenants (18 lines copied" "$AGENT_LOG")" 1
	expect_eq "t12 and t14 in policy.json" \
		"$(jq -c '[.tenants[] | select(.name == "t12" or .name == "t14") | .rate]' "$p")" '["12/s","14/s"]'
	want=$(tenants_json)
	agent_stop KILL
	agent_start
	expect_eq "tenants after a restart" "$(tenants_json)" "$want"
	expect_eq "tenants" "$(jq length <<<"$want")" 20
}

# flow_ends: "place value" of every end of a flow the attached program has
# marked (its .bss, which is not pinned), one a line, by place.
flow_ends() {
	local id
	for id in $(bpftool -j prog show pinned "$PIN_DIR/xdp_rlgate" | jq '.map_ids[]'); do
		bpftool -j map show id "$id" | jq -e '.name | endswith(".bss")' >/dev/null || continue
		bpftool -j map dump id "$id" |
			jq -r '.[0].formatted.value[".bss"][] | select(.flow_ends) | .flow_ends |
				to_entries[] | select(.value != 0) | "\(.key) \(.value)"'
	done
}

@test "the ends of flows the program marked are taken over by the program of a restarted agent (SIGTERM, then SIGKILL): none is forgotten" {
	local before after sig

	agent_start
	rl tenant set fe --rate 100/s --burst 100 --match "$(prefixes c1)" --port "$PORT"
	# whole connections: each client's FIN ends its flow
	connect_c1 20
	expect_eq "connected" "$CONNECTED" 20
	before=$(flow_ends)
	echo "ends marked: $(wc -l <<<"$before")"
	expect_between "ends marked" "$(grep -c . <<<"$before")" 1 20
	for sig in TERM KILL; do
		agent_stop "$sig"
		agent_start
		after=$(flow_ends)
		expect_eq "ends forgotten across SIG$sig and a restart" \
			"$(comm -23 <(sort <<<"$before") <(sort <<<"$after") | wc -l)" 0
	done
}
