#!/usr/bin/env bats
# Per-source limits inside a tenant (rlctl tenant set --per-source): real
# clients in a lab against a real server on s1.  One client flooding cannot
# spend the tenant's budget for its other clients; IPv6 addresses of one
# /64 are one source; a full per-source table evicts nobody, so cycling
# addresses gains an abuser nothing beyond the overflow bucket, and entries
# come back once their buckets have refilled; a forged flood through one
# tenant fills only that tenant's share of the table.
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

# table_used_after_sweep N: the per-source table's entries in use once they
# are down to N, or after five seconds (a sweep runs every second while the
# table is a quarter full), whatever they are then.
table_used_after_sweep() {
	local i used

	# a deadline of 15 s for a sweep due every second: a loaded machine
	# once left all 16 entries in place for 5 s
	for ((i = 0; i < 150; i++)); do
		used=$(rl --json status | jq -r .per_source_table.used)
		((used == $1)) && break
		sleep 0.1
	done
	echo "$used"
}

# forged_flood: about 200 SYNs from forged sources of 198.51.100.0/24 (far
# more than 16 addresses) from c2 straight onto s1's wire, to s1:$PORT; s1
# has no route back to them.  How many were sent in FLOOD_SENT.
forged_flood() {
	local mac

	mac=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].address')
	FLOOD_SENT=$(in_ns c2 /usr/bin/python3 "$BATS_TEST_DIRNAME/syn_flood.py" \
		eth0 "$mac" "$(lab_addr s1 4)" "$PORT" 198.51.100.0/24 198.51.100.1 \
		100 2 | jq -r .sent)
	expect_between "forged SYNs sent" "$FLOOD_SENT" 150 201
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
	expect_eq "entries used after the sweep" "$(table_used_after_sweep 0)" 0
	expect_eq "reclaimed" "$(rl --json status | jq -r .per_source_table.reclaimed)" 16
	expect_eq "metric rlgate_per_source_table_size" \
		"$(metric_value rlgate_per_source_table_size "$(metrics s1)")" 16
}

@test "a forged flood of new sources through one tenant fills only its share of the table: another, verifying tenant's 5 new real clients each get a bucket of their own (5 of 5)" {
	local a i addrs=() sent

	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=2
	agent_start --per-source-table 16
	# two tenants with a per-source limit: 8 entries each
	rl tenant set noisy --rate 100000/s --burst 100000 --match 198.51.100.0/24 \
		--per-source 1/h,1 --action drop
	rl tenant set web --rate 1000/s --burst 1000 --match "$(prefixes c1)" \
		--per-source 1/h,1 --verify syncookie --action rst
	forged_flood
	sent=$FLOOD_SENT
	expect_eq "noisy's entries: its share" \
		"$(rl --json status | jq -r .per_source_table.used)" 8
	expect_between "noisy's SYNs judged by its overflow bucket" \
		"$(stat_get noisy source_overflow)" $((sent - 8 - 40)) $((sent - 8))

	# web's new clients, one connection each from 5 addresses
	for i in 66 67 68 69; do addrs+=("192.0.2.$i"); done
	add_addrs c1 4 "${addrs[@]}"
	addrs=("$(lab_addr c1 4)" "${addrs[@]}")
	for a in "${addrs[@]}"; do
		connect_from c1 "$a" 1 4
	done
	expect_eq "web's connections admitted (of 5)" "$(admitted_since web 0)" 5
	expect_eq "web's SYNs judged by an overflow bucket" \
		"$(stat_get web source_overflow)" 0
	expect_eq "entries used" "$(rl --json status | jq -r .per_source_table.used)" 13

	# the sweep gives noisy's share back as it reclaims its entries (a
	# fast rate refills them at once): a second flood takes 8 entries again
	rl tenant set noisy --per-source 1000/s,1
	expect_eq "entries used after the sweep (web's 5, in debt)" \
		"$(table_used_after_sweep 5)" 5
	rl tenant set noisy --per-source 1/h,1
	forged_flood
	expect_eq "entries used after a second flood" \
		"$(rl --json status | jq -r .per_source_table.used)" 13
}
