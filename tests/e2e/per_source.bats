#!/usr/bin/env bats
# Per-source limits inside a tenant (rlctl tenant set --per-source): real
# clients in a lab against a real server on s1.  One client flooding cannot
# spend the tenant's budget for its other clients; IPv6 addresses of one
# /64 are one source; a full per-source table evicts nobody, so cycling
# addresses gains an abuser nothing beyond the overflow bucket, and entries
# come back once their buckets have refilled.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

# add_addrs HOST FAMILY ADDR...: more addresses on HOST's eth0 (IPv6 ones
# without duplicate address detection, so that they are usable at once).
add_addrs() {
	local host=$1 fam=$2 a

	shift 2
	for a in "$@"; do
		if [[ $fam == 6 ]]; then
			in_ns "$host" ip -6 addr add "$a/64" dev eth0 nodad
		else
			in_ns "$host" ip addr add "$a/24" dev eth0
		fi
	done
}

# connect_from HOST ADDR N FAMILY: N connections from ADDR in HOST to s1,
# one loadgen run each (a run of several at a rate may start fewer on a
# loaded machine).  What the limit made of them is read from the agent's
# counters (admitted_now): a client may also see an admitted connection
# time out on a loaded machine.
connect_from() {
	local i

	for ((i = 0; i < $3; i++)); do
		run_loadgen_json "$1" --bind "$2" --rate 1 --duration 1 \
			"$(lab_target s1 "$PORT" "$4")" >/dev/null || return 1
		expect_eq "attempts from $2" "$(json_get .total.attempts)" 1 || return 1
	done
}

# admitted_since TENANT BEFORE: SYNs of TENANT the kernel admitted since
# its admitted count was BEFORE.
admitted_since() {
	echo $(($(stat_get "$1" admitted) - $2))
}

@test "one client flooding at 300/s is held to its own 20/s; the tenant's other client sees no refusal, and the refusals count as the source's" {
	local out c2 flood attempts admitted refused

	agent_start
	rl tenant set web --rate 100/s --burst 100 --match "$(prefixes c1 c2)" \
		--per-source 20/s,20 --action rst
	out=$BATS_TEST_TMPDIR/c2.json
	loadgen_bg c2 "$out" --rate 10 --duration 3 "$(lab_target s1 "$PORT" 4)"
	c2=$LOADGEN_BG_PID
	run_loadgen_json c1 --rate 300 --duration 3 "$(lab_target s1 "$PORT" 4)"
	flood=$LOADGEN_JSON
	loadgen_wait "$c2" "$out"

	# attempts: a loaded machine may start fewer than rate x duration
	expect_between "c2 attempts" "$(json_get .total.attempts)" 20 30
	expect_eq "c2 refused" "$(json_get .total.refused)" 0
	expect_eq "c2 timed out" "$(json_get .total.timed_out)" 0
	attempts=$(json_get .total.attempts "$flood")
	expect_between "c1 attempts" "$attempts" 600 900
	refused=$(json_get .total.refused "$flood")
	admitted=$((attempts - refused))
	# rate x time + burst, and the half second loadgen may take to start
	expect_between "c1 admitted" "$admitted" 60 "$(expected 20 3.5 20)"
	expect_between "denied_source" "$(stat_get web denied_source)" \
		$((refused - 2)) $((refused + 2))
	expect_eq "denied_tenant" "$(stat_get web denied_tenant)" 0
	expect_eq "metric rlgate_denied_source_total" \
		"$(metric_get rlgate_denied_source_total web)" "$(stat_get web denied_source)"
	# the top source is c1's address, with its refusals
	run rl stats web --sources 3
	echo "$output"
	[[ $status == 0 ]]
	[[ $output == *DENIED-SRC* ]]
	grep -E "^web +$(lab_addr c1 4) +[0-9]+\$" <<<"$output"
	[[ $(grep -cE '^web +[0-9]+[.][0-9.]+ ' <<<"$output") == 1 ]]
	# top shows it under the tenants, and in its JSON lines
	run rl top --iterations 1
	[[ $status == 0 ]]
	grep -E "^web +$(lab_addr c1 4) +[0-9]+\$" <<<"$output"
	[[ $(rl --json top --iterations 1 | jq -r '.sources[0].source') == "$(lab_addr c1 4)" ]]
}

@test "IPv6 clients rotating addresses inside one /64 are one source; --source-mask /32,/128 makes each address its own" {
	local a n addrs=()

	agent_start
	for n in 1 2 3 4 5 6; do addrs+=("2001:db8:1:0:1::1$n"); done
	add_addrs c1 6 "${addrs[@]}"
	rl tenant set v6 --rate 1000/s --match "$(prefixes c1)" --per-source 1/h,5 --action rst
	for a in "${addrs[@]}"; do
		connect_from c1 "$a" 3 6
	done
	expect_eq "admitted from 6 addresses of one /64 (burst 5)" \
		"$(admitted_since v6 0)" 5
	expect_eq "denied_source" "$(stat_get v6 denied_source)" 13

	rl tenant set v6 --source-mask /32,/128
	for a in "${addrs[@]}"; do
		connect_from c1 "$a" 3 6
	done
	expect_eq "admitted with /128 sources (3 of 3 each)" \
		"$(admitted_since v6 5)" 18
}

@test "a full per-source table evicts nobody: 28 sources cycled through a table of 16 admit 16 x burst + the overflow bucket's burst; refilled entries are reclaimed" {
	local a i addrs=() used

	agent_start --per-source-table 16
	# c1 owns 192.0.2.64/28 (its own .65), c2 192.0.2.80/28 (.81)
	for i in $(seq 66 78); do addrs+=("192.0.2.$i"); done
	add_addrs c1 4 "${addrs[@]}"
	addrs=("$(lab_addr c1 4)" "${addrs[@]}")
	rl tenant set cyc --rate 1000/s --burst 1000 --match "$(prefixes c1 c2)" \
		--per-source 1/h,2 --action rst
	for a in "${addrs[@]}"; do
		connect_from c1 "$a" 3 4
	done
	# 14 sources, each its own bucket of 2 (16 places: all fit)
	expect_eq "admitted, 14 sources of burst 2" "$(admitted_since cyc 0)" 28
	used=$(rl --json status | jq -r .per_source_table.used)
	expect_eq "entries used" "$used" 14

	# 14 more sources from c2: 2 get a place, 12 share the overflow bucket
	addrs=()
	for i in $(seq 81 94); do addrs+=("192.0.2.$i"); done
	add_addrs c2 4 "${addrs[@]:1}"
	for a in "${addrs[@]}"; do
		connect_from c2 "$a" 3 4
	done
	expect_eq "admitted, 2 with a place (2 each) + the overflow bucket (2)" \
		"$(admitted_since cyc 28)" 6
	expect_eq "entries used" "$(rl --json status | jq -r .per_source_table.used)" 16
	expect_eq "source_overflow" "$(stat_get cyc source_overflow)" 36
	# c1's sources kept their debt: nothing more for them
	connect_from c1 "$(lab_addr c1 4)" 3 4
	expect_eq "c1 again" "$(admitted_since cyc 34)" 0
	rl status | grep -E '^per-source: +16 of 16 sources'

	# refilled buckets are reclaimed by the sweep (every second while the
	# table is a quarter full): a fast rate refills them at once
	rl tenant set cyc --per-source 1000/s,2
	for i in $(seq 1 50); do
		used=$(rl --json status | jq -r .per_source_table.used)
		((used == 0)) && break
		sleep 0.1
	done
	expect_eq "entries used after the sweep" "$used" 0
	expect_eq "reclaimed" "$(rl --json status | jq -r .per_source_table.reclaimed)" 16
	expect_eq "metric rlgate_per_source_table_size" \
		"$(metric_value rlgate_per_source_table_size "$(metrics s1)")" 16
}
