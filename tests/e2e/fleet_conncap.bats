#!/usr/bin/env bats
# Connection caps across a fleet: three agents share one tenant's cap
# through Redis (slots.lua), nginx on each of their hosts, a client holding
# long-lived connections to all three.  The fleet never holds more than the
# cap; what one host closes another takes; an agent SIGKILLed loses its
# slots after the holding's TTL (3 s) without anyone's help, and its kernel
# follows the fail policy once its heartbeat is stale.

load helpers
load agent_helpers
load fleet_helpers
load conncap_helpers

setup_file() {
	fleet_setup_file nginx python3
	local h

	for h in s1 s2 s3; do
		BATS_TEST_TMPDIR=$BATS_FILE_TMPDIR nginx_start "$h"
	done
}
teardown_file() { fleet_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown fleet_back; }

# nginx_kill HOST: HOST's nginx, its worker first, SIGKILLed by PID.
nginx_kill() {
	local master w

	master=$(<"$BATS_FILE_TMPDIR/nginx-$1/nginx.pid")
	for w in $(pgrep -P "$master"); do
		proc_stop "$w" KILL
	done
	proc_stop "$master" KILL
}

# fleet_back: every agent and nginx running again, if a test killed one
# and failed before it restarted it (the next tests need the whole fleet).
fleet_back() {
	local h started=0

	for h in 1 2 3; do
		if ! in_ns "s$h" ss -Htln "sport = :$CAP_PORT" | grep -q .; then
			BATS_TEST_TMPDIR=$BATS_FILE_TMPDIR nginx_start "s$h" || return 1
		fi
		[[ -z $(fleet_pid "$h") ]] || continue
		fleet_agent_start "$h" || return 1
		started=1
	done
	((started == 0)) || fleet_wait_steady 10
}

# slots_held TENANT: the slots every live holder holds in Redis, summed.
slots_held() {
	rcli HVALS "rl:{t:$1}:slots" | awk '{ s += $1 } END { print s + 0 }'
}

# held_by TENANT: "holder=slots ..." as Redis has them, for the log.
held_by() {
	rcli HGETALL "rl:{t:$1}:slots" | paste -sd' '
}

# in_flight TENANT: connections in flight on s1..s3, as their kernels count.
in_flight() {
	fleet_sum "$1" conns
}

# slots_live TENANT: the slots of TENANT live holders hold in Redis (a
# holding whose time has passed is no one's, though still stored until
# slots.lua next runs).
slots_live() {
	rcli EVAL "local t = redis.call('TIME')
		local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
		local s = 0
		for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')) do
			s = s + (tonumber(redis.call('HGET', KEYS[1], h)) or 0)
		end
		return s" 2 "rl:{t:$1}:slots" "rl:{t:$1}:slot_exp"
}

# open_paced NAME HOST TENANT CAP N: client NAME, connected to agent HOST's
# server, opens N connections one at a time, each once HOST's kernel has a
# slot of TENANT free, or the fleet none left to take (its live holdings
# sum to CAP): the agent takes its next chunk at its next check, and one
# that a loaded machine slowed does so before the next connection rather
# than within a fixed gap.  10 s at most for each.  REPLY as client_do
# leaves it, summed over the N.
open_paced() {
	local name=$1 host=$2 tenant=$3 cap=$4 n=$5 k i free c=0 r=0 t=0 f=0

	for ((k = 0; k < n; k++)); do
		for ((i = 0; i < 200; i++)); do
			free=$(rls "$host" --json stats "$tenant" |
				jq -r ".[] | select(.tenant == \"$tenant\") | .conn_slots - .conns")
			((free > 0)) && break
			(($(slots_live "$tenant") >= cap)) && break
			sleep 0.05
		done
		client_do "$name" open 1 || return 1
		c=$((c + $(jq .connected <<<"$REPLY"))) r=$((r + $(jq .refused <<<"$REPLY")))
		t=$((t + $(jq .timed_out <<<"$REPLY"))) f=$((f + $(jq .failed <<<"$REPLY")))
	done
	REPLY=$(jq -c ".connected = $c | .refused = $r | .timed_out = $t | .failed = $f" <<<"$REPLY")
}

# capped_50 TENANT: TENANT capped at 50 in flight across the fleet (refused
# with a RST), rate no object, and client a in c1 connected to s1.
capped_50() {
	fleet_tenant_set 1 "$1" --rate 100000/s --burst 100000 --match "$(prefixes c1)" \
		--action rst --max-conns 50
	fleet_wait_tenant "$1" 5 >/dev/null
	client_start a c1 s1
}

# wait_cold TENANT CAP SECONDS: no host holds a slot of TENANT in Redis (an
# idle host gives its holding back) and s1 has seen that at a renewal: its
# kernel may admit the whole CAP.
wait_cold() {
	local n

	for ((n = 0; n < $3 * 10; n++)); do
		(($(slots_live "$1") == 0)) && (($(fleet_stat 1 "$1" conn_slots) == $2)) &&
			return 0
		sleep 0.1
	done
	echo "'$1' not cold after $3 s: s1's slots $(fleet_stat 1 "$1" conn_slots); Redis: $(held_by "$1")" >&2
	return 1
}

# burst_held TENANT CAP: client a opens CAP connections to s1 back to back
# (each as soon as the last connected), from a cold fleet; at least 95 % of
# them hold, the fleet's servers never hold more than CAP + the bound the
# agents show, and s1's holding claims what its kernel admitted beyond it
# within a few checks.
burst_held() {
	local held bound total

	client_do a open "$2"
	held=$(jq .connected <<<"$REPLY")
	bound=$(fleet_stat 1 "$1" conn_overshoot_bound)
	total=$(($(server_conns s1) + $(server_conns s2) + $(server_conns s3)))
	echo "back to back: $held of $2 held on s1; fleet $total, bound $bound; Redis: $(held_by "$1")"
	expect_between "held of $2 opened back to back on s1" "$held" $(((95 * $2 + 99) / 100)) "$2"
	expect_eq "the bound above the cap (3 - 1 agents x the cap)" "$bound" $((2 * $2))
	expect_between "connections the fleet's servers hold" "$total" "$held" $(($2 + bound))
	fleet_wait_stat 1 "$1" conn_held "$held" 5
	expect_between "slots held in Redis" "$(slots_held "$1")" "$held" "$2"
}

# capped_30 TENANT RATE: TENANT capped at 30 in flight across the fleet
# (refused with a RST), RATE SYNs a second, and clients a, b and c in c1
# connected to s1, s2 and s3.
capped_30() {
	fleet_tenant_set 1 "$1" --rate "$2/s" --burst "$2" --match "$(prefixes c1)" \
		--action rst --max-conns 30
	fleet_wait_tenant "$1" 5 >/dev/null
	client_start a c1 s1
	client_start b c1 s2
	client_start c c1 s3
}

# keep_holding TENANT HOLDER MS: HOLDER's holding of TENANT expires at MS
# (Redis milliseconds) from now on, as a renewal would have it.  Fails when
# the holding is gone already.  (One still there whose time has passed was
# seen expired by no one: slots.lua, the only reader, removes it first.)
keep_holding() {
	rcli ZADD "rl:{t:$1}:slot_exp" XX "$3" "$2" >/dev/null
	expect_eq "$2's holding of '$1' expires at" "$(rcli ZSCORE "rl:{t:$1}:slot_exp" "$2")" "$3"
}

# redis_gone HOST: Redis has no client connected from HOST any more, and so
# has run everything that HOST's dead agent sent it.  5 s at most.
redis_gone() {
	local a n

	a=$(lab_addr "$1")
	for ((n = 0; n < 50; n++)); do
		rcli CLIENT LIST | grep -q " addr=$a:" || return 0
		sleep 0.1
	done
	echo "Redis still has a client from $1 ($a)" >&2
	return 1
}

# kill_stale_holding TENANT FAIL BOUND: TENANT capped at 30 with fail policy
# FAIL, its bound on connections above the cap shown as BOUND, client a
# holding 4 connections to s1 (which holds room for more, at most two
# chunks of 2), then s1's agent SIGKILLed at T0 (ms) and its heartbeat
# stale (2 s) by the time this returns.
kill_stale_holding() {
	local i

	fleet_tenant_set 1 "$1" --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--action rst --max-conns 30 --fail "$2"
	fleet_wait_tenant "$1" 5 >/dev/null
	client_start a c1 s1
	open_paced a 1 "$1" 30 4
	expect_eq "held on s1" "$(jq .connected <<<"$REPLY")" 4
	# the next check tops the holding up by a chunk
	for ((i = 0; i < 30; i++)); do
		(($(fleet_stat 1 "$1" conn_held) > 4)) && break
		sleep 0.1
	done
	expect_between "s1's holding, room for more" "$(fleet_stat 1 "$1" conn_held)" 5 8
	# and its kernel may fill the slots nobody holds
	expect_eq "s1's slots, the cap less the others' holdings" \
		"$(fleet_stat 1 "$1" conn_slots)" 30
	expect_eq "the bound above the cap, stats" "$(fleet_stat 1 "$1" conn_overshoot_bound)" "$3"
	expect_eq "the bound above the cap, rlctl stats's CONN-BOUND" "$(rls 1 stats "$1" |
		awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "CONN-BOUND") c = i }
		     NR == 2 && c { print $c }')" "$3"
	expect_eq "the bound above the cap, metrics" \
		"$(fleet_metric 1 "rlgate_conn_overshoot_bound{tenant=\"$1\"}")" "$3"
	rls 1 tenant get "$1" | grep -qx "conn overshoot bound: $3" ||
		{ rls 1 tenant get "$1" >&2; return 1; }
	fleet_agent_stop 1 KILL
	T0=$(now_ms)
	sleep_until $((T0 + 2500))
}

@test "a cap of 50 opened back to back from cold on one host of three: at least 48 held (the kernel admits into the free slots, the holding claims them); never more than the cap + the bound" {
	capped_50 capb
	wait_cold capb 50 10
	burst_held capb 50
	client_do a quit
}

@test "a cap of 50 opened back to back on one host after the other two closed what they held: at least 48 held" {
	local n

	capped_50 capo
	client_start b c1 s2
	client_start c c1 s3
	client_do b open 25
	client_do c open 25
	expect_eq "held on s2 and s3" $(($(server_conns s2) + $(server_conns s3))) 50
	# s1 sees the others' holdings at its next renewal (a heartbeat)
	for ((n = 0; n < 50; n++)); do
		(($(fleet_stat 1 capo conn_slots) == 0)) && break
		sleep 0.1
	done
	expect_eq "s1's slots with the cap held elsewhere" "$(fleet_stat 1 capo conn_slots)" 0
	client_do a open 5
	expect_eq "more on s1 with the cap held elsewhere" "$(jq .connected <<<"$REPLY")" 0
	client_do b close 25
	client_do c close 25
	# s2 and s3 give all back once idle (no SYN over their samples), and
	# s1 sees it at its next renewal
	wait_cold capo 50 15
	burst_held capo 50
	for n in a b c; do client_do "$n" quit; done
}

@test "a cap of 50 opened back to back on one host after another's agent and server were killed holding 25: at least 48 held once the dead holding expired (3 s)" {
	local t0

	capped_50 capx
	client_start b c1 s2
	client_do b open 25
	expect_eq "held on s2" "$(server_conns s2)" 25
	fleet_wait_stat 2 capx conn_held 25 5
	fleet_agent_stop 2 KILL
	nginx_kill s2
	t0=$(now_ms)
	# the client's side of what the dead server left half closed
	client_do b close 25
	wait_cold capx 50 15
	echo "cold $(($(now_ms) - t0)) ms after the kill"
	burst_held capx 50
	client_do a quit
	client_do b quit
	fleet_back
}

@test "a cap of 30 shared by 3 hosts: clients trying to hold 20 on each hold at most 30; 10 closed on one host are given back and taken by another" {
	local a b c total i

	capped_30 capf 10000

	open_paced a 1 capf 30 20
	a=$(jq .connected <<<"$REPLY")
	open_paced b 2 capf 30 20
	b=$(jq .connected <<<"$REPLY")
	open_paced c 3 capf 30 20
	c=$(jq .connected <<<"$REPLY")
	total=$((a + b + c))
	echo "held: s1 $a, s2 $b, s3 $c; Redis: $(held_by capf)"
	# each host holds at most two chunks (2 slots each) it does not use
	expect_between "connections held by the fleet" "$total" 18 30
	expect_eq "connections the servers hold" \
		$(($(server_conns s1) + $(server_conns s2) + $(server_conns s3))) "$total"
	expect_eq "in flight, summed over the kernels" "$(in_flight capf)" "$total"
	expect_between "slots held in Redis" "$(slots_held capf)" "$total" 30
	expect_eq "s1 first: everything it asked for" "$a" 20

	client_do a close 10
	# s1's agent gives back all but two chunks beyond its 10 at its next
	# check
	for ((i = 0; i < 200; i++)); do
		(($(rcli HGET "rl:{t:capf}:slots" "$(rcli HKEYS "rl:{t:capf}:slots" | grep '^s1/')") <= 14)) &&
			break
		sleep 0.05
	done
	open_paced c 3 capf 30 10
	echo "after s1 closed 10: s3 took $(jq .connected <<<"$REPLY"); Redis: $(held_by capf)"
	expect_between "connections s3 took of the 10 s1 gave back" "$(jq .connected <<<"$REPLY")" 6 10
	total=$(($(server_conns s1) + $(server_conns s2) + $(server_conns s3)))
	expect_between "connections held by the fleet" "$total" 18 30
	expect_between "slots held in Redis" "$(slots_held capf)" "$total" 30
	for n in a b c; do client_do "$n" quit; done
}

@test "an agent SIGKILLed while holding slots loses them within the holding's TTL (3 s); until then the fleet stays within the cap" {
	local t0 a b i

	fleet_tenant_set 1 capk --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--action rst --max-conns 10
	fleet_wait_tenant capk 5 >/dev/null
	client_start a c1 s1
	client_start b c1 s2
	open_paced a 1 capk 10 10
	a=$(jq .connected <<<"$REPLY")
	# s2 and s3 hold a chunk (1 slot) each for their first SYN
	expect_between "held on s1" "$a" 8 10
	# s2 sees s1's holding at its next renewal (a heartbeat): before
	# that it may admit into slots it saw free (within the bound)
	for ((i = 0; i < 50; i++)); do
		(($(fleet_stat 2 capk conn_slots) + a <= 10)) && break
		sleep 0.1
	done
	fleet_agent_stop 1 KILL
	t0=$(now_ms)
	client_do b open 3 100
	b=$(jq .connected <<<"$REPLY")
	echo "s1 dead: s2 took $b; Redis: $(held_by capk)"
	expect_between "s1's and s2's connections while s1's holding lives" $((a + b)) "$a" 10
	sleep_until $((t0 + 4500))
	open_paced b 2 capk 10 5
	echo "after the TTL: s2 took $(jq .connected <<<"$REPLY"); Redis: $(held_by capk)"
	expect_eq "s2 after s1's holding expired" "$(jq .connected <<<"$REPLY")" 5
	[[ $(held_by capk) != *s1/* ]] || { echo "s1's holding is still in Redis" >&2; return 1; }
	expect_eq "connections s1 still serves (its kernel keeps them)" "$(server_conns s1)" "$a"
	for n in a b; do client_do "$n" quit; done
	fleet_agent_start 1
	fleet_wait_steady 10
}

@test "an agent SIGKILLed: once its heartbeat is stale (2 s) its kernel admits to the static share (cap / live agents), not to the slots it held; the fleet stays within the cap + that share" {
	local t0 a=4 more others

	client_start b c1 s2
	# s1 holds its 4 and at most two chunks (2 slots each): fewer than
	# its share of 10
	# (3 - 1) hosts x the cap of 30
	kill_stale_holding capd static 60
	t0=$T0
	client_do a open 10 100
	more=$(jq .connected <<<"$REPLY")
	echo "s1 dead and stale: took $more more; Redis: $(held_by capd)"
	expect_eq "s1 up to its share (30 / 3) with its agent dead" $((a + more)) 10
	sleep_until $((t0 + 4500))
	open_paced b 2 capd 30 30
	others=$(($(server_conns s2) + $(server_conns s3)))
	echo "after s1's holding expired: s2 took $(jq .connected <<<"$REPLY"); Redis: $(held_by capd)"
	expect_between "s2 and s3 within the cap" "$others" 20 30
	expect_between "the fleet within the cap + the dead host's share (within the bound)" \
		$((others + $(server_conns s1))) 30 40
	for n in a b; do client_do "$n" quit; done
	fleet_agent_start 1
	fleet_wait_steady 10
}

@test "an agent SIGKILLed with fail deny: once its heartbeat is stale its kernel admits no new connection, whatever slots it held; those in flight stay" {
	kill_stale_holding capn deny 60
	client_do a open 3 100
	expect_eq "new connections on s1, agent dead and stale" "$(jq .connected <<<"$REPLY")" 0
	expect_eq "connections s1 still serves" "$(server_conns s1)" 4
	client_do a quit
	fleet_agent_start 1
	fleet_wait_steady 10
}

@test "a capped tenant with fail allow has no bound above its cap: null in stats --json, 'none' in tenant get, +Inf in metrics" {
	fleet_tenant_set 1 capa --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--max-conns 30 --fail allow
	fleet_wait_tenant capa 5 >/dev/null
	expect_eq "stats --json: present, null" \
		"$(rls 1 --json stats capa | jq -c '.[0] | [has("conn_overshoot_bound"), .conn_overshoot_bound]')" \
		'[true,null]'
	rls 1 tenant get capa | grep -qx "conn overshoot bound: none (fail allow)" ||
		{ rls 1 tenant get capa >&2; return 1; }
	expect_eq "metrics" "$(fleet_metric 1 'rlgate_conn_overshoot_bound{tenant="capa"}')" +Inf
}

@test "Redis away: the static fail policy gives each host the cap / live agents; once Redis answers, the host leases its slots again" {
	local i

	fleet_tenant_set 1 caps --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--action rst --max-conns 30 --fail static
	fleet_wait_tenant caps 5 >/dev/null
	client_start a c1 s1
	proc_stop "$(redis_pid)" KILL
	for ((i = 0; i < 50; i++)); do
		[[ $(rls 1 --json status | jq -r .broker) == degraded ]] && break
		sleep 0.1
	done
	expect_eq "s1 broker" "$(rls 1 --json status | jq -r .broker)" degraded
	sleep 0.2
	expect_eq "s1's slots while degraded (30 / 3 agents)" "$(fleet_stat 1 caps conn_slots)" 10
	client_do a open 15 50
	expect_eq "held on s1 while Redis is away" "$(jq .connected <<<"$REPLY")" 10
	redis_start
	fleet_wait_steady 10
	sleep 1.5
	open_paced a 1 caps 30 5
	expect_eq "more on s1 once Redis answers" "$(jq .connected <<<"$REPLY")" 5
	expect_eq "s1's holding in Redis" "$(rcli HGET "rl:{t:caps}:slots" "$(rcli HKEYS "rl:{t:caps}:slots" | grep '^s1/')")" \
		"$(fleet_stat 1 caps conn_held)"
	client_do a quit
}

@test "churn: 1,500 connections opened and reset over 5 s on 3 hosts under a cap of 30 cost Redis at most one call per 10 admitted beyond each holding's renewal once a second (slots are renewed, not taken per connection)" {
	local connected calls opened t0 t1 renewals i

	fleet_tenant_set 1 capc --rate 100000/s --burst 100000 --match "$(prefixes c1)" \
		--action rst --max-conns 30
	fleet_wait_tenant capc 5 >/dev/null
	sleep 1.5
	t0=$(now_ms)
	calls=$(fleet_sum capc redis_calls)
	# (a connection the loaded lab delays is given 10 s: it connects, or
	# is refused, rather than timing out)
	run_loadgen_json c1 --rate 300 --duration 5 --timeout 10000 --max-inflight 200 \
		$(fleet_targets "$PORT" 1 1 1)
	connected=$(json_get .total.connected)
	sleep 0.5
	calls=$(($(fleet_sum capc redis_calls) - calls))
	t1=$(now_ms)
	opened=$(fleet_sum capc conns_opened)
	# Each host renews its holding at most once a second whatever the
	# traffic, however long the machine took over the run: those calls
	# come from the time, the rest from the connections.
	renewals=$((3 * ((t1 - t0) / 1000 + 1)))
	echo "connected $connected of 1500, counted in $opened, Redis calls $calls (tokens and slots) in $((t1 - t0)) ms, $renewals of them renewals at most"
	expect_eq "attempts" "$(json_get .total.attempts)" 1500
	# The rest refused by a host whose holding and the free slots it saw
	# were all in flight before its agent's next check: a host admits into
	# the slots nobody holds, so at most a few of them (1,500 of 1,500 on a
	# loaded machine); 95% is the bound.
	expect_eq "connected + refused" "$(json_get '.total.connected + .total.refused')" 1500
	expect_between "connected" "$connected" 1425 1500
	expect_between "connections counted in" "$opened" "$connected" 1500
	expect_between "Redis calls: $renewals renewals + one per 10 of $connected admitted, at most" \
		"$calls" 0 $((renewals + connected / 10))
	# the kernels see every connection's reset
	for ((i = 0; i < 100; i++)); do
		(($(fleet_sum capc conns) == 0)) && break
		sleep 0.1
	done
	expect_eq "in flight once they are reset" "$(fleet_sum capc conns)" 0
}

@test "churn under the cap: once the hosts are warm (each holds its share ahead of the churn it sampled), half the cap of 30 opened at once on 3 hosts (5 each, back to back) under 300 connections/s opened and reset is refused nothing at the cap; the fleet holds no more than the cap" {
	local denied n i out=$BATS_TEST_TMPDIR/churn

	capped_30 capw 100000
	fleet_loadgen_bg c1 "$out" --rate 300 --duration 8 --timeout 10000 --max-inflight 200 \
		$(fleet_targets "$PORT" 1 1 1)
	# warm: each agent has sampled the churn (once a second) and holds
	# its share (30 / 3) ahead of it; refusals before then are not
	# counted
	for n in 1 2 3; do
		fleet_wait_stat "$n" capw conn_slots 10 6
	done
	denied=$(fleet_sum capw conn_denied)
	for n in a b c; do
		client_do "$n" open 5
		expect_eq "connected by client $n at once" "$(jq .connected <<<"$REPLY")" 5
	done
	loadgen_wait "$LOADGEN_BG_PID" "$out"
	echo "churn: connected $(json_get .total.connected) of $(json_get .total.attempts), refused $(json_get .total.refused); Redis: $(held_by capw)"
	expect_eq "refused at the cap once warm, as the kernels count" \
		$(($(fleet_sum capw conn_denied) - denied)) 0
	# the kernels see every reset of the churn
	for ((i = 0; i < 100; i++)); do
		(($(in_flight capw) == 15)) && break
		sleep 0.1
	done
	expect_eq "in flight, summed over the kernels" "$(in_flight capw)" 15
	expect_between "slots held in Redis" "$(slots_held capw)" 15 30
	for n in a b c; do client_do "$n" quit; done
}

@test "an agent restarted on its pins (a new holder) counts its connections in flight against what it can hold: never twice, and in full once its old holding expires" {
	local held old new i

	fleet_tenant_set 1 capr --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--action rst --max-conns 10
	fleet_wait_tenant capr 5 >/dev/null
	client_start a c1 s1
	open_paced a 1 capr 10 6
	expect_eq "held on s1" "$(jq .connected <<<"$REPLY")" 6
	old=$(rcli HKEYS "rl:{t:capr}:slots" | grep '^s1/')
	# The old holding (6 and a chunk) lives on for its TTL (3 s) from its
	# last renewal, up to a heartbeat (1 s) before the kill: less than an
	# agent start and a steady fleet take on a loaded machine, and a new
	# holder that found it gone would rightly get all of it.  So the test
	# keeps it alive, as renewals would, for as long as it looks: at once,
	# and again once Redis has run whatever the dead agent had sent (a
	# renewal on its way would set it back to 3 s).  That it expires by
	# itself is the SIGKILL tests' to show.
	fleet_agent_stop 1 KILL
	keep_holding capr "$old" 9999999999999
	redis_gone s1
	keep_holding capr "$old" 9999999999999
	fleet_agent_start 1
	fleet_wait_steady 10
	# the new holder's first holding, once Redis and s1's kernel agree on
	# it: what is left beside the old one, less than what s1 has in flight
	for ((i = 0; i < 100; i++)); do
		new=$(rcli HKEYS "rl:{t:capr}:slots" | grep '^s1/' | grep -vxF "$old") &&
			[[ $(rcli HGET "rl:{t:capr}:slots" "$new") == "$(fleet_stat 1 capr conn_held)" ]] &&
			break
		sleep 0.1
	done
	held=$(fleet_stat 1 capr conn_held)
	echo "s1 restarted: slots $held, in flight $(fleet_stat 1 capr conns); Redis: $(held_by capr)"
	expect_between "s1's slots beside its old holding" "$held" 0 5
	client_do a open 2 100
	expect_eq "more on s1 while the old holding lives" "$(jq .connected <<<"$REPLY")" 0
	expect_between "slots held in Redis" "$(slots_held capr)" 0 10
	# the old holding expires now: the next call of any holder removes
	# it, and s1, short of slots, asks again within a heartbeat
	rcli ZADD "rl:{t:capr}:slot_exp" XX 0 "$old" >/dev/null
	fleet_wait_stat 1 capr conn_held 7 5
	[[ $(held_by capr) != *"$old"* ]] || { echo "$old's holding is still in Redis" >&2; return 1; }
	echo "after the old holding expired: slots $(fleet_stat 1 capr conn_held); Redis: $(held_by capr)"
	expect_eq "s1's connections, counted across the restart" "$(fleet_stat 1 capr conns)" 6
	expect_between "s1's holding once the old holding expired" "$(fleet_stat 1 capr conn_held)" 7 8
	expect_eq "s1's slots once the old holding expired: the whole cap" \
		"$(fleet_stat 1 capr conn_slots)" 10
	open_paced a 1 capr 10 2
	expect_eq "more on s1 once the old holding expired" "$(jq .connected <<<"$REPLY")" 2
	client_do a quit
}

@test "Redis away: an instance limit of 8 on s1 holds over a tenant with fail allow and a client no tenant matches; it is s1's alone" {
	local i

	fleet_tenant_set 1 capi --rate 10000/s --burst 10000 --match "$(prefixes c1)" \
		--action rst --fail allow
	fleet_wait_tenant capi 5 >/dev/null
	rls 1 instance set --max-conns 8
	expect_eq "s2 has no instance limit" "$(rls 2 --json instance get)" null
	client_start a c1 s1
	client_start u c2 s1
	proc_stop "$(redis_pid)" KILL
	for ((i = 0; i < 50; i++)); do
		[[ $(rls 1 --json status | jq -r .broker) == degraded ]] && break
		sleep 0.1
	done
	expect_eq "s1 broker" "$(rls 1 --json status | jq -r .broker)" degraded
	client_do a open 5 50
	expect_eq "tenant's connections while Redis is away" "$(jq .connected <<<"$REPLY")" 5
	client_do u open 5 50
	expect_eq "unmatched connections while Redis is away" "$(jq .connected <<<"$REPLY")" 3
	expect_eq "s1's instance in flight" "$(rls 1 --json instance get | jq .conns)" 8
	client_do a open 2 50
	expect_eq "tenant (fail allow) over the instance limit" "$(jq .connected <<<"$REPLY")" 0
	redis_start
	fleet_wait_steady 10
	rls 1 instance del
	client_do a quit
	client_do u quit
}
