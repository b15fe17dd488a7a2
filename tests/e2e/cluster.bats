#!/usr/bin/env bats
# Fleet mode on a Redis Cluster, end to end: three hosts each with its own
# rlagent (--redis cluster:SEEDS), a cluster of three masters with a replica
# each on the Redis host, tenants whose slots live on different masters.
# Limits hold per tenant across the shards; a master killed is an outage
# for its tenants only, and leasing resumes once its replica is promoted;
# a tenant's slot moved by hand or by redis-cli --cluster reshard keeps every
# token; leases lost with a lagging replica stay within the stated bound.
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets

load helpers
load agent_helpers
load fleet_helpers
load chaos_helpers
load cluster_helpers

FLEET_PORTS=(8080 8081)

setup_file() { cluster_setup_file; }
teardown_file() { cluster_teardown_file; }
setup() { fleet_setup; }
teardown() { lag_stop; fleet_teardown cluster_restore; }

RATE=150
BURST=20
DUR=8
C1=192.0.2.64/28	# client c1's prefix (docs/lab.md)

# Tenants "acme" (slot 9557) and "beta" (slot 13638) are on the second and
# third master of a fresh cluster; a test that kills one checks where they
# are first.

settle() {
	local t

	for t in "$@"; do
		fleet_wait_tenant "$t" 2 >/dev/null
	done
	sleep 1.5
}

@test "every agent learns the cluster from its seeds: healthy, Redis connected, 3 live agents in the registry's slot on one master" {
	local i j m

	for i in 1 2 3; do
		j=$(rls "$i" --json status)
		echo "s$i: $(jq -c . <<<"$j")"
		expect_eq "s$i broker" "$(json_get .broker "$j")" healthy
		expect_eq "s$i redis.state" "$(json_get .redis.state "$j")" connected
		expect_eq "s$i redis.address" "$(json_get .redis.address "$j")" "$REDIS_ADDR"
		expect_eq "s$i live_agents" "$(json_get .live_agents "$j")" 3
	done
	m=$(cluster_master_of "rl:{registry}:agents")
	expect_eq "agents in rl:{registry}:agents on its master ($m)" \
		"$(ccli "$m" ZCARD 'rl:{registry}:agents')" 3
}

@test "two tenants on two masters, 1.5x over their limits from three hosts: each admits its limit, and each bucket lives on its own slot's master" {
	local bound_a bound_b a b ma mb

	ma=$(cluster_master_of t:acme)
	mb=$(cluster_master_of t:beta)
	[[ $ma != "$mb" ]] || { echo "acme and beta on one master ($ma)" >&2; return 1; }
	fleet_tenant_set 1 acme --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8080 \
		--action rst
	fleet_tenant_set 2 beta --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8081 \
		--action rst
	settle acme beta
	run_loadgen_json c1 --rate 450 --duration "$DUR" $(fleet_targets 8080 1 1 1) \
		$(fleet_targets 8081 1 1 1)
	bound_a=$(fleet_stat 1 acme overshoot_bound)
	bound_b=$(fleet_stat 1 beta overshoot_bound)
	b=$(json_get '[.targets[] | select(.target | endswith(":8081")) | .connected] | add')
	a=$(json_get '[.targets[] | select(.target | endswith(":8080")) | .connected] | add')
	echo "acme (master $ma) admitted $a, beta (master $mb) $b; bounds $bound_a $bound_b"
	fleet_admitted_check "acme admitted" "$a" "$RATE" "$BURST" "$bound_a"
	fleet_admitted_check "beta admitted" "$b" "$RATE" "$BURST" "$bound_b"
	# each tenant on its own master: refused past its limit there
	expect_between "acme refused" "$(fleet_sum acme denied)" 1 1000000
	expect_between "beta refused" "$(fleet_sum beta denied)" 1 1000000
	expect_eq "acme's bucket on master $ma" "$(ccli "$ma" EXISTS 'rl:{t:acme}:bucket')" 1
	expect_eq "beta's bucket on master $mb" "$(ccli "$mb" EXISTS 'rl:{t:beta}:bucket')" 1
	expect_eq "acme's policy on master $ma" "$(ccli "$ma" HGET 'rl:{t:acme}:policy' version | grep -c .)" 1
}

# "hot" split 3 ways: its sub-buckets' slots (t:hot#0 7114, t:hot#1 3051,
# t:hot#2 15240) are on the three masters.  Hosts s1 and s2 start at
# sub-bucket 1, s3 at 2; sub-bucket 0 is leased only when they fall back.
@test "a tenant split into 3 sub-buckets (--shards 3), one on each master: 1.5x over its limit from three hosts it admits its limit, and at 60% of it nothing is refused" {
	local out=$BATS_TEST_TMPDIR/load.json i ms=() bound a d0 d1

	for i in 0 1 2; do ms+=("$(cluster_master_of "t:hot#$i")"); done
	[[ $(printf '%s\n' "${ms[@]}" | sort -u | wc -l) == 3 ]] ||
		{ echo "hot's sub-buckets on masters ${ms[*]}: not three" >&2; return 1; }
	# the file's burst (20): sub-buckets of 50/s and 6 or 7, as small as a
	# split tenant's get; nothing below the limit may be refused all the same
	fleet_tenant_set 1 hot --rate "$RATE/s" --burst "$BURST" --shards 3 --match "$C1" \
		--port 8080 --action rst
	settle hot
	expect_eq "shards as host 3 holds hot" "$(rls 3 --json tenant get hot | jq .shards)" 3
	fleet_loadgen_bg c1 "$out" --rate 225 --duration "$DUR" $(fleet_targets 8080 1 1 1)
	sleep 2
	# each sub-bucket on its own slot's master, while the load keeps it
	for i in 0 1 2; do
		expect_eq "sub-bucket $i on master ${ms[i]}" \
			"$(ccli "${ms[i]}" EXISTS "rl:{t:hot#$i}:bucket")" 1
	done
	loadgen_wait "$LOADGEN_BG_PID" "$out"
	a=$(json_get .total.connected)
	bound=$(fleet_stat 1 hot overshoot_bound)
	echo "hot (masters ${ms[*]}) admitted $a (bound $bound)"
	fleet_admitted_check "hot admitted at 1.5x" "$a" "$RATE" "$BURST" "$bound"
	expect_between "hot refused at 1.5x" "$(fleet_sum hot denied)" 1 1000000
	sleep 1
	d0=$(fleet_sum hot denied)
	run_loadgen_json c1 --rate 90 --duration 5 $(fleet_targets 8080 1 1 1)
	d1=$(fleet_sum hot denied)
	echo "at 60%: $(json_get .total.connected) admitted, $((d1 - d0)) refused by the kernels"
	expect_eq "SYNs refused by the kernels at 60% of the limit" $((d1 - d0)) 0
	expect_eq "connections refused (RST) at 60% of the limit" "$(json_get .total.refused)" 0
	expect_eq "connections timed out" "$(json_get .total.timed_out)" 0
}

@test "a master killed under load: only its tenant meets its fail policy, the other keeps leasing, and a tenant split over the three masters only loses that shard's sub-bucket; its replica promoted, leasing resumes within seconds" {
	local out=$BATS_TEST_TMPDIR/load.json out2=$BATS_TEST_TMPDIR/load2.json mb ma t0 s0 s1 s2 a0 a1 a2 h0 h1 p1 p2

	ma=$(cluster_master_of t:acme)
	mb=$(cluster_master_of t:beta)
	[[ $ma != "$mb" ]] || { echo "acme and beta on one master ($ma)" >&2; return 1; }
	fleet_tenant_set 1 acme --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8080 \
		--action rst --fail deny
	fleet_tenant_set 2 beta --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8081 \
		--action rst --fail allow
	# hot's sub-buckets are on the three masters (see above); at 40% of
	# its limit, the two left carry it
	fleet_tenant_set 1 hot --rate "$RATE/s" --burst "$BURST" --shards 3 \
		--match "$(client_prefix c2)" --port 8080 --action rst --fail deny
	settle acme beta hot
	# below both limits: whatever is refused is refused by a fail policy
	fleet_loadgen_bg c1 "$out" --rate 180 --duration 20 $(fleet_targets 8080 1 1 1) \
		$(fleet_targets 8081 1 1 1)
	p1=$LOADGEN_BG_PID
	fleet_loadgen_bg c2 "$out2" --rate 60 --duration 20 $(fleet_targets 8080 1 1 1)
	p2=$LOADGEN_BG_PID
	sleep 2
	a0=$(fleet_snap acme) s0=$(fleet_snap beta) h0=$(fleet_snap hot)
	t0=$(now_ms)
	proc_stop "$(cluster_node_pid "$mb")" KILL
	# every agent sees beta's shard go, acme's stay
	ch_wait_broker "$t0" degraded 2 1 2 3
	# the replica is promoted (cluster-node-timeout 1 s) and every agent
	# follows it
	fleet_wait_steady 15
	echo "healthy again $(($(now_ms) - t0)) ms after the kill"
	expect_between "ms from the kill to every agent healthy" $(($(now_ms) - t0)) 0 15000
	a1=$(fleet_snap acme) s1=$(fleet_snap beta) h1=$(fleet_snap hot)
	echo "hot while $mb was gone: $(fleet_delta "$h0" "$h1" admitted) admitted," \
		"$(fleet_delta "$h0" "$h1" denied) refused"
	expect_eq "hot SYNs decided by its fail policy (deny) while $mb was gone" \
		"$(fleet_delta "$h0" "$h1" degraded)" 0
	expect_eq "hot refused while $mb was gone" "$(fleet_delta "$h0" "$h1" denied)" 0
	expect_eq "acme SYNs decided by its fail policy while beta's master was gone" \
		"$(fleet_delta "$a0" "$a1" degraded)" 0
	expect_eq "acme refused while beta's master was gone" "$(fleet_delta "$a0" "$a1" denied)" 0
	[[ $(fleet_delta "$s0" "$s1" degraded) -gt 0 ]] ||
		{ echo "beta: no SYN met its fail policy during the outage" >&2; return 1; }
	# fail allow: nothing refused, also between the shard's breaker
	# closing and beta's first lease's reply (the fail policy holds until
	# that lease is back)
	expect_eq "beta refused (fail allow)" "$(fleet_delta "$s0" "$s1" denied)" 0
	# leasing again: beta's fail policy decides nothing more
	sleep 1
	s1=$(fleet_snap beta) a1=$(fleet_snap acme)
	sleep 3
	s2=$(fleet_snap beta) a2=$(fleet_snap acme)
	expect_eq "beta SYNs decided by its fail policy after the promotion" \
		"$(fleet_delta "$s1" "$s2" degraded)" 0
	[[ $(fleet_delta "$s1" "$s2" admitted) -gt 100 ]] ||
		{ echo "beta admitted $(fleet_delta "$s1" "$s2" admitted) in 3 s after the promotion" >&2; return 1; }
	[[ $(fleet_delta "$a1" "$a2" admitted) -gt 100 ]] ||
		{ echo "acme admitted $(fleet_delta "$a1" "$a2" admitted) in 3 s" >&2; return 1; }
	[[ $(cluster_master_of t:beta "$ma") != "$mb" ]] ||
		{ echo "beta still on $mb after the failover" >&2; return 1; }
	# 20 s covers the slowest promotion; the loads end here after a quicker one
	loadgen_stop "$p2" "$out2"
	expect_eq "hot's connections timed out" "$(jq .total.timed_out "$out2")" 0
	loadgen_stop "$p1" "$out"
	expect_eq "connections timed out" "$(jq .total.timed_out "$out")" 0
}

@test "a tenant's slot moved to another master under 1.5x load (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE): the agents follow ASK then MOVED, and the limit holds" {
	local out=$BATS_TEST_TMPDIR/load.json src dst slot sid did p lim bound a asks k

	fleet_tenant_set 1 acme --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8080 \
		--action rst
	settle acme
	src=$(cluster_master_of t:acme)
	for p in "${CLUSTER_PORTS[@]}"; do
		[[ $p != "$src" && $(ccli "$p" ROLE | head -1) == master ]] && dst=$p && break
	done
	slot=$(ccli "$src" CLUSTER KEYSLOT t:acme)
	sid=$(ccli "$src" CLUSTER MYID)
	did=$(ccli "$dst" CLUSTER MYID)
	asks=$(ccli "$dst" INFO commandstats | grep -o 'cmdstat_asking:calls=[0-9]*' | cut -d= -f2)
	fleet_loadgen_bg c1 "$out" --rate 225 --duration "$DUR" $(fleet_targets 8080 1 1 1)
	sleep 1.5
	[[ $(ccli "$dst" CLUSTER SETSLOT "$slot" IMPORTING "$sid") == OK ]]
	[[ $(ccli "$src" CLUSTER SETSLOT "$slot" MIGRATING "$did") == OK ]]
	sleep 1
	# the bucket first: leases for it are asked of the source, which
	# answers ASK, while the policy is still read there
	[[ $(ccli "$src" MIGRATE "$CLUSTER_IP" "$dst" "" 0 5000 KEYS 'rl:{t:acme}:bucket') == OK ]]
	sleep 2
	for k in $(ccli "$src" CLUSTER GETKEYSINSLOT "$slot" 100); do
		[[ $(ccli "$src" MIGRATE "$CLUSTER_IP" "$dst" "" 0 5000 KEYS "$k") == OK ]]
	done
	for p in "$dst" "$src" "${CLUSTER_PORTS[@]}"; do
		[[ $(ccli "$p" ROLE | head -1) == master ]] || continue
		[[ $(ccli "$p" CLUSTER SETSLOT "$slot" NODE "$did") == OK ]]
	done
	loadgen_wait "$LOADGEN_BG_PID" "$out"
	a=$(json_get .total.connected)
	lim=$(calc "$RATE * $DUR + $BURST")
	bound=$(fleet_stat 1 acme overshoot_bound)
	echo "slot $slot moved from $src to $dst under load: admitted $a of $lim (bound $bound)"
	expect_between "acme admitted" "$a" "$(calc "0.95 * $lim")" "$(calc "$lim + $bound")"
	expect_eq "connections timed out" "$(json_get .total.timed_out)" 0
	[[ $(ccli "$dst" INFO commandstats | grep -o 'cmdstat_asking:calls=[0-9]*' | cut -d= -f2) -gt ${asks:-0} ]] ||
		{ echo "no ASKING reached $dst: the migration was not seen" >&2; return 1; }
	expect_eq "acme's bucket on $dst" "$(ccli "$dst" EXISTS 'rl:{t:acme}:bucket')" 1
	expect_eq "acme's master" "$(cluster_master_of t:acme "$dst")" "$dst"
	fleet_wait_steady 5
}

# name_in_slot SLOT: a tenant name whose keys ({t:NAME}) hash to SLOT
# (CRC16/XMODEM of the hash tag, modulo 16384, as the cluster spec has it).
name_in_slot() {
	python3 - "$1" <<'PY'
import sys
want = int(sys.argv[1])
def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc
n = 0
while crc16(b"t:rs%d" % n) % 16384 != want:
    n += 1
print("rs%d" % n)
PY
}

# evalsha_calls PORT: EVALSHA calls the node on PORT has served.
evalsha_calls() {
	ccli "$1" INFO commandstats | grep -o 'cmdstat_evalsha:calls=[0-9]*' | cut -d= -f2
}

@test "redis-cli --cluster reshard moves a tenant's slot to another master under load: the agents follow it, and every token is accounted for (bucket + held + admitted = burst, nothing owed)" {
	local out=$BATS_TEST_TMPDIR/load.json src dst sid did slot t p bkt held adm owed calls

	cluster_wait_ok 10 "${CLUSTER_PORTS[@]}"
	# reshard takes a source's slots from its lowest: a tenant in the
	# lowest slot of a master moves alone with --cluster-slots 1
	src=$(cluster_master_of t:acme)
	for p in "${CLUSTER_PORTS[@]}"; do
		[[ $p != "$src" && $(ccli "$p" ROLE | head -1) == master ]] && dst=$p && break
	done
	slot=$(ccli "$src" --json CLUSTER SLOTS | jq --argjson p "$src" \
		'[.[] | select(.[2][1] == $p) | .[0]] | min')
	t=$(name_in_slot "$slot")
	[[ $(ccli "$src" CLUSTER KEYSLOT "t:$t") == "$slot" ]]
	sid=$(ccli "$src" CLUSTER MYID)
	did=$(ccli "$dst" CLUSTER MYID)
	# 1/h: the bucket changes only by leases and refunds; the hosts hold
	# 20 tokens each at most, so they lease all along
	fleet_tenant_set 1 "$t" --rate 1/h --burst 3000 --overshoot 60 --match "$C1" \
		--port 8080 --action rst
	settle "$t"
	calls=$(evalsha_calls "$dst")
	fleet_loadgen_bg c1 "$out" --rate 150 --duration 6 $(fleet_targets 8080 1 1 1)
	sleep 2
	in_ns redis redis-cli "${CLUSTER_CLI_TLS[@]}" --cluster reshard "$CLUSTER_IP:$src" \
		--cluster-from "$sid" --cluster-to "$did" --cluster-slots 1 --cluster-yes \
		>"$BATS_TEST_TMPDIR/reshard.log" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/reshard.log" >&2; return 1; }
	grep -q "Moving slot $slot from" "$BATS_TEST_TMPDIR/reshard.log" ||
		{ cat "$BATS_TEST_TMPDIR/reshard.log" >&2; return 1; }
	loadgen_wait "$LOADGEN_BG_PID" "$out"
	expect_eq "$t's master after the reshard" "$(cluster_master_of "t:$t" "$dst")" "$dst"
	expect_eq "keys of slot $slot left on $src" "$(ccli "$src" CLUSTER COUNTKEYSINSLOT "$slot")" 0
	[[ $(evalsha_calls "$dst") -gt $((calls + 20)) ]] ||
		{ echo "the agents did not lease from $dst after the move" >&2; return 1; }
	expect_eq "connections refused (3000 tokens for 900)" "$(json_get .total.refused)" 0
	# idle past the lease TTL: the hosts keep their credit, no call in flight
	sleep 3
	bkt=$(ccli "$dst" HGET "rl:{t:$t}:bucket" tokens)
	held=$(fleet_sum "$t" tokens) adm=$(fleet_sum "$t" admitted) owed=$(fleet_sum "$t" tokens_owed)
	echo "slot $slot ($t) moved $src -> $dst: bucket $bkt, held $held, admitted $adm, owed $owed"
	expect_eq "admitted by the kernels" "$adm" "$(json_get .total.connected)"
	expect_eq "tokens owed by the hosts" "$owed" 0
	expect_eq "bucket + held + admitted" $((bkt + held + adm)) 3000
	fleet_wait_steady 5
}

# lag_start PORT: the replication stream of the master on PORT stops
# reaching its replica (on the Redis host's own address; the agents'
# connections, from other hosts, and the cluster bus are untouched).
lag_start() {
	ip netns exec "$(lab_ns redis)" nft -f - <<-NFT
		table ip rlgate_lag {
			chain out {
				type filter hook output priority 0;
				ip saddr $CLUSTER_IP ip daddr $CLUSTER_IP tcp sport $1 drop
			}
		}
	NFT
}
lag_stop() { ip netns exec "$(lab_ns redis)" nft delete table ip rlgate_lag 2>/dev/null || true; }

@test "leases granted by a master whose replica lags, lost when it is promoted: the tokens created are at most what the fleet admitted in the lag plus one overshoot budget (docs/redis.md)" {
	local out=$BATS_TEST_TMPDIR/load.json m t0 t1 adm0 adm1 bkt held adm owed lost budget

	m=$(cluster_master_of t:acme)
	# 1/h: the bucket changes only by leases and refunds, so what the
	# promoted replica forgot shows in its count; 20 tokens per host
	fleet_tenant_set 1 acme --rate 1/h --burst 3000 --overshoot 60 --match "$C1" \
		--port 8080 --action rst --fail deny
	settle acme
	budget=60
	fleet_loadgen_bg c1 "$out" --rate 150 --duration 9 $(fleet_targets 8080 1 1 1)
	sleep 2
	adm0=$(fleet_sum acme admitted)
	t0=$(now_ms)
	lag_start "$m"
	sleep 1.5
	proc_stop "$(cluster_node_pid "$m")" KILL
	t1=$(now_ms)
	adm1=$(fleet_sum acme admitted)
	# until the replica is promoted: the dead master's kernel would
	# still deliver what it had queued for it
	fleet_wait_steady 15
	lag_stop
	loadgen_stop "$LOADGEN_BG_PID" "$out"
	# idle past the lease TTL: no call in flight
	sleep 3
	m=$(cluster_master_of t:acme)
	bkt=$(ccli "$m" HGET 'rl:{t:acme}:bucket' tokens)
	held=$(fleet_sum acme tokens) adm=$(fleet_sum acme admitted) owed=$(fleet_sum acme tokens_owed)
	lost=$((bkt + held + adm - 3000))
	echo "replica lagged $((t1 - t0)) ms, the fleet admitted $((adm1 - adm0)) meanwhile;" \
		"after the promotion: bucket $bkt + held $held + admitted $adm = 3000 + $lost (owed $owed)"
	expect_eq "tokens owed by the hosts" "$owed" 0
	[[ $lost -gt 0 ]] || { echo "no lease was lost: the test did not lag the replica" >&2; return 1; }
	expect_between "tokens created by the failover" "$lost" 1 $((adm1 - adm0 + budget))
}

@test "SIGTERM hands an agent's unspent leased tokens back to the bucket on its tenant's master: every token accounted for" {
	local held b0 b1 m

	# As fleet.bats' test of a single Redis: 1/h, so the bucket changes
	# only by leases and refunds; host 4 keeps idle tokens (lease TTL 30 s)
	# until its shutdown refund.
	fleet_agent_start_counted 4 --lease-ttl 30000
	fleet_tenant_set 1 rf --rate 1/h --burst 100 --match "$(client_prefix c2)" --port 8080 \
		--action rst
	fleet_wait_tenant rf 2 4 >/dev/null
	fleet_wait_stat 4 rf tokens 1 2
	run_loadgen_json c2 --rate 20 --duration 0.5 "$(lab_target s4 8080)"
	expect_eq "connected through s4" "$(json_get .total.connected)" 10
	sleep 2
	m=$(cluster_master_of t:rf)
	held=$(fleet_stat 4 rf tokens)
	b0=$(ccli "$m" HGET 'rl:{t:rf}:bucket' tokens)
	echo "s4 holds $held tokens; the bucket on master $m has $b0"
	expect_between "tokens held by s4" "$held" 1 100
	fleet_agent_stop 4 TERM
	expect_eq "s4 exit status after SIGTERM" "$FLEET_RC" 0
	b1=$(ccli "$m" HGET 'rl:{t:rf}:bucket' tokens)
	expect_eq "bucket after SIGTERM (was $b0, s4 held $held)" "$b1" $((b0 + held))
	expect_eq "tokens owed by hosts 1-3" "$(fleet_sum rf tokens_owed)" 0
	expect_eq "tokens: Redis + hosts 1-3 + spent" $((b1 + $(fleet_sum rf tokens) + 10)) 100
}

@test "the master of the registry and of the agents' subscriptions killed: the count of agents holds, and after the promotion a tenant set on host 1 reaches hosts 2 and 3 within 2 s" {
	local m i j

	# The subscribers start on the first seed that serves slots (7001),
	# which also serves the registry's slot (3850) in a fresh cluster.
	m=$(cluster_master_of "rl:{registry}:agents")
	proc_stop "$(cluster_node_pid "$m")" KILL
	fleet_wait_steady 15
	[[ $(cluster_master_of "rl:{registry}:agents" "$(cluster_master_of t:acme)") != "$m" ]] ||
		{ echo "the registry is still on $m" >&2; return 1; }
	for i in 1 2 3; do
		j=$(rls "$i" --json status)
		expect_eq "s$i live_agents after the registry's failover" "$(json_get .live_agents "$j")" 3
	done
	fleet_tenant_set 1 late --rate 10/s --burst 5 --match 198.51.100.0/24
	fleet_wait_tenant late 2 2 3 >/dev/null
}
