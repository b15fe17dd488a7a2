#!/usr/bin/env bats
# Fleet mode against its limit, end to end: three hosts, each with its own
# rlagent leasing from one Redis, real connections from two clients to real
# servers.  Below the limit nothing is refused - load spread evenly, skewed
# 90/5/5, and moving from host to host every two seconds, up to 95% of the
# limit - and above it the fleet admits the limit: at least 97% of
# rate x T + burst, at most that plus the overshoot bound.
#
# One lab and three agents for the file; each test makes its own tenant
# (deleted at teardown), with a burst of a tenth of a second of its rate: a
# global bucket much smaller than what the hosts hold between them, where
# leases sized without regard to it refuse connections below the limit.

# shellcheck disable=SC2046 # $(fleet_targets ...) is several loadgen targets

load helpers
load agent_helpers
load fleet_helpers

FLEET_SERVERS=3
# The stall test stops an agent for a moment, which must not count as its
# death (no test here stops one for long).
FLEET_AGENT_OPTS=(--heartbeat-stale 60000)

setup_file() { fleet_setup_file; }
teardown_file() { fleet_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown; }

SECS=8		# seconds of load per test

# limit_tenant NAME RATE: a tenant of RATE/s with a burst of a tenth of a
# second for both clients' prefixes (its bucket split $SHARDS ways, default
# 1), on every host, settled (first leases back, a lease TTL idle).
limit_tenant() {
	fleet_tenant_set 1 "$1" --rate "$2/s" --burst $(($2 / 10)) \
		--match "$(client_prefix c1),$(client_prefix c2)" --action rst \
		--shards "${SHARDS:-1}"
	fleet_wait_tenant "$1" 2 >/dev/null
	sleep 1.5
}

# offer OUT RATE SECS W1 W2 W3 [W1 W2 W3]...: RATE/s in all from both
# clients (half each) for SECS seconds, weighted W1/W2/W3 over the hosts;
# with several weight triples, SECS is split evenly between them, in turn:
# the load moves.  OUT gets the reports, one JSON per line.
offer() {
	local out=$1 rate=$2 secs=$3 n p1 p2 k=0

	shift 3
	n=$(($# / 3))
	while (($# >= 3)); do
		k=$((k + 1))
		loadgen_bg c1 "$out.c1" --rate "$(calc "$rate / 2")" --duration "$(calc "$secs / $n")" \
			--times "$out.times.c1.$k" $(fleet_targets "$PORT" "$1" "$2" "$3")
		p1=$LOADGEN_BG_PID
		loadgen_bg c2 "$out.c2" --rate "$(calc "$rate / 2")" --duration "$(calc "$secs / $n")" \
			--times "$out.times.c2.$k" $(fleet_targets "$PORT" "$1" "$2" "$3")
		p2=$LOADGEN_BG_PID
		loadgen_wait "$p1" "$out.c1" >/dev/null || return 1
		jq -c . "$out.c1" >>"$out"
		loadgen_wait "$p2" "$out.c2" >/dev/null || return 1
		jq -c . "$out.c2" >>"$out"
		shift 3
	done
}

# bucket_refusals RATE BURST OUT: how many of offer()'s attempts into OUT
# one token bucket of RATE/s holding BURST, full at the first, would have
# refused, judged at the moments the clients started them (loadgen --times).
# A client the machine stalled catches up at once on waking, and that burst
# can be over the limit although the rate asked for is under it.
bucket_refusals() {
	sort -n "$3".times.* | awk -v r="$1" -v b="$2" '
		NR == 1 { tok = b; last = $1 }
		{
			tok += ($1 - last) / 1e9 * r
			if (tok > b)
				tok = b
			last = $1
			if (tok >= 1)
				tok -= 1
			else
				ref++
		}
		END { print ref + 0 }'
}

# total OUT FIELD: FIELD of the reports' totals, summed.
total() {
	jq -s --arg f "$2" 'map(.total[$f]) | add' "$1"
}

# under_limit NAME RATE PERCENT CALLS W1 W2 W3 [...]: PERCENT of RATE
# offered as offer() does; at most 0.1% of the connections refused by rlgate
# (and never more than $UNDER_SLACK: see the 100/s case)
# (the kernels' count of refused SYNs, and the RSTs the clients got), at most
# CALLS Redis calls per admitted connection.  A connection that timed out was
# not refused by rlgate (action rst answers every refusal at once): the
# loaded machine starved the client or the server, and it is reported, not
# counted among the RSTs seen; the kernels' count of refused SYNs holds
# every SYN rlgate refused, whatever became of its client, so none of
# rlgate's refusals escapes the check.
#
# The clients keep an absolute schedule: one the machine stalls catches up
# at once on waking, and that burst can be over the limit although the rate
# asked for is under it.  A run whose attempts one bucket of the limit would
# not all have admitted (bucket_refusals, from the moments the clients
# started them) did not offer load under the limit, and says nothing of
# refusals under it: it is reported and the load offered again, up to three
# runs; a machine that stalls the clients in every one fails the test.
under_limit() {
	local name=$1 rate=$2 pct=$3 max=$4 out att ref to den den0 calls adm ideal run

	shift 4
	limit_tenant "$name" "$rate"
	for run in 1 2 3; do
		out=$BATS_TEST_TMPDIR/load.$run.json
		den0=$(fleet_sum "$name" denied)
		offer "$out" "$(calc "$rate * $pct / 100")" "$SECS" "$@"
		att=$(total "$out" attempts)
		ref=$(total "$out" refused)
		to=$(total "$out" timed_out)
		sleep 1.2
		den=$(($(fleet_sum "$name" denied) - den0))
		ideal=$(bucket_refusals "$rate" "$((rate / 10))" "$out")
		echo "$name, run $run: $att offered ($pct% of $rate/s), $den refused by the" \
			"kernels, $ref RSTs seen ($(calc "$ref / $att" %.5f)), $to timed out;" \
			"one bucket of the limit would have refused $ideal"
		((ideal > 0)) || break
		echo "$name, run $run: a stalled client went over the limit; again"
		sleep 0.3	# with the 1.2 s above, as settled as limit_tenant leaves it
	done
	expect_eq "attempts one bucket of the limit would refuse, in the last of $run runs" "$ideal" 0
	calls=$(fleet_sum "$name" redis_calls)
	adm=$(fleet_sum "$name" admitted)
	echo "$name: $calls Redis calls for $adm admitted"
	expect_between "connections offered" "$att" "$(calc "0.95 * $rate * $pct / 100 * $SECS")" \
		"$(calc "$rate * $pct / 100 * $SECS")"
	expect_between "SYNs refused by the kernels of $att at $pct% of the limit" "$den" 0 \
		"$(calc "int($att / 1000) + ${UNDER_SLACK:-0}")"
	expect_between "connections refused (RST) of $att at $pct% of the limit" "$ref" 0 \
		"$(calc "int($att / 1000) + ${UNDER_SLACK:-0}")"
	expect_between "Redis calls per admitted connection" "$(calc "$calls / $adm")" 0 "$max"
}

@test "1000/s, 95% of the limit spread evenly over three hosts: at most 0.1% refused" {
	under_limit even 1000 95 0.1 1 1 1
}

@test "1000/s, 95% of the limit skewed 90/5/5: at most 0.1% refused" {
	under_limit skew 1000 95 0.1 18 1 1
}

@test "1000/s, 95% of the limit moving from host to host every 2 s (90/5/5): at most 0.1% refused" {
	under_limit moving 1000 95 0.1 18 1 1 1 18 1 1 1 18 18 1 1
}

# A burst of 10: no lease is bigger, so a call per 4 connections is as good
# as it gets with a few partial grants.  At 95% the fleet's slack is 5
# tokens a second, and when the load moves, the host it moves to starts from
# a lease sized for 5% of it and an overdraft of 4 tokens (a cap of 16):
# about 50 ms of its new load.  A lease answer later than that (a loaded
# machine) cost that host a SYN, 1 of 760 in one run of several before the
# overdraft; with it, 0 of 760 in each of 3 runs on a loaded machine.  One
# is allowed (0.13%) for the lease answer the machine delays past the
# overdraft; more is a failure.
@test "100/s, 95% of the limit skewed 90/5/5, then moving: at most 1 refused" {
	UNDER_SLACK=1 under_limit slow 100 95 0.25 18 1 1 1 18 1 1 1 18 1 1 1
}

# The overdraft: a host whose agent cannot lease for a moment (a stalled
# CPU, a slow round trip) while its traffic starts.  Its kernel admits the
# reserve it holds and then, instead of refusing, a quarter of its share of
# the budget more (1000/s burst 100 over 3 hosts: a cap of 166, an
# overdraft of 41, a reserve of 33), exactly, counted in
# rlgate_syn_overdrawn_total; the next lease pays it back before the host
# holds a token again.
@test "an agent stopped while its traffic starts: its kernel admits exactly the reserve and the overdraft, and the next lease pays the overdraft back" {
	local out=$BATS_TEST_TMPDIR/stall.json held n adm0 adm1 ov0 ov1 l0 r0 l1 r1 tok pid

	limit_tenant stall 1000
	# idle: back to the reserve, which nothing changes until traffic comes
	for ((n = 0; n < 100; n++)); do
		held=$(fleet_stat 1 stall tokens)
		((held == 33)) && break
		sleep 0.1
	done
	expect_eq "s1's reserve of 'stall'" "$held" 33
	adm0=$(fleet_stat 1 stall admitted)
	l0=$(fleet_stat 1 stall tokens_leased)
	r0=$(fleet_stat 1 stall tokens_refunded)
	ov0=$(fleet_metric 1 rlgate_syn_overdrawn_total)
	pid=$(fleet_pid 1)
	kill -STOP "$pid"
	ip netns exec "$(lab_ns c1)" "$LOADGEN" --json --rate 2000 --duration 0.15 \
		"$(lab_target s1 "$PORT")" >"$out" 2>"$out.err" 3>&- || true
	kill -CONT "$pid"
	adm1=$(fleet_stat 1 stall admitted)
	ov1=$(fleet_metric 1 rlgate_syn_overdrawn_total)
	echo "stall: $(jq -c .total "$out"); admitted $((adm1 - adm0)), overdrawn $((ov1 - ov0))"
	expect_eq "connections admitted by s1's kernel with its agent stopped" \
		"$((adm1 - adm0))" 74
	expect_eq "SYNs admitted on the overdraft" "$((ov1 - ov0))" 41
	expect_between "connections attempted" "$(jq .total.attempts "$out")" 100 300
	expect_between "connections made" "$(jq .total.connected "$out")" 0 74
	# the agent leases again: the 41 first, then tokens; held, leased and
	# refunded from one answer of the agent, so that no lease lands between
	for ((n = 0; n < 100; n++)); do
		read -r tok l1 r1 < <(rls 1 --json stats stall |
			jq -r '.[0] | "\(.tokens) \(.tokens_leased) \(.tokens_refunded)"')
		((tok > 0)) && break
		sleep 0.1
	done
	echo "after: $tok tokens held; leased $((l1 - l0)), refunded $((r1 - r0))"
	expect_between "tokens s1 holds once it leases again" "$tok" 1 125
	expect_between "tokens leased less refunded since the stop" "$((l1 - l0 - r1 + r0))" \
		"$((tok + 41))" "$((tok + 41))"
	expect_eq "SYNs admitted on the overdraft since" \
		"$(fleet_metric 1 rlgate_syn_overdrawn_total)" "$ov1"
}

# Split 3 ways, each host starts at its own sub-bucket (333 or 334/s) and
# takes the rest from the others: the host with 90% of the load (855/s)
# leases from all three, and still nothing is refused.  The sub-buckets are
# three keys in the one Redis, with the whole bucket's key unused.
@test "1000/s split into 3 sub-buckets (--shards 3), 95% of the limit skewed 90/5/5: at most 0.1% refused, leased from three bucket keys" {
	local keys=$BATS_TEST_TMPDIR/keys

	# the bucket keys Redis holds while the test runs (an idle one expires)
	while :; do rcli --scan --pattern 'rl:{t:hot*:bucket'; sleep 0.5; done >"$keys" &
	fleet_bg_track $!
	SHARDS=3 under_limit hot 1000 95 0.1 18 1 1
	expect_eq "bucket keys seen" "$(sort -u "$keys" | tr '\n' ' ')" \
		"rl:{t:hot#0}:bucket rl:{t:hot#1}:bucket rl:{t:hot#2}:bucket "
	expect_eq "shards as host 3 holds the tenant" \
		"$(rls 3 --json tenant get hot | jq .shards)" 3
}

@test "1000/s, 150% of the limit skewed 90/5/5: the fleet admits at least 97% of rate x T + burst, at most that plus the overshoot bound" {
	local out=$BATS_TEST_TMPDIR/load.json adm t lim bound calls

	limit_tenant over 1000
	offer "$out" 1500 "$SECS" 18 1 1
	adm=$(total "$out" connected)
	t=$(jq -s 'map(.elapsed_s) | max' "$out")
	lim=$(calc "1000 * $t + 100")
	bound=$(fleet_stat 1 over overshoot_bound)
	sleep 1.2
	calls=$(fleet_sum over redis_calls)
	echo "over: admitted $adm in $t s; rate x T + burst = $lim, bound $bound; $calls Redis calls"
	expect_between "admitted at 150% of the limit" "$adm" "$(calc "0.97 * $lim")" \
		"$(calc "$lim + $bound")"
	expect_between "Redis calls per admitted connection" "$(calc "$calls / $adm")" 0 0.1
}

# Split while at the limit: the sub-buckets start full, as any new bucket,
# while the whole bucket was spent: at most one burst more than the bound.
@test "1000/s at 150% of the limit, split into 3 sub-buckets halfway: at least 97% of rate x T + burst, at most that plus the bound and one burst" {
	local out=$BATS_TEST_TMPDIR/load.json adm t lim bound pid

	limit_tenant resplit 1000
	offer "$out" 1500 "$SECS" 1 1 1 &
	pid=$!
	fleet_bg_track "$pid"
	sleep "$(calc "$SECS / 2")"
	rls 1 tenant set resplit --shards 3 >/dev/null
	wait "$pid"
	adm=$(total "$out" connected)
	t=$(jq -s 'map(.elapsed_s) | max' "$out")
	lim=$(calc "1000 * $t + 100")
	bound=$(fleet_stat 1 resplit overshoot_bound)
	echo "resplit: admitted $adm in $t s; rate x T + burst = $lim, bound $bound + burst 100"
	expect_eq "shards as host 2 holds the tenant" \
		"$(rls 2 --json tenant get resplit | jq .shards)" 3
	expect_between "admitted at 150% of the limit" "$adm" "$(calc "0.97 * $lim")" \
		"$(calc "$lim + $bound + 100")"
}

# After a spell above the limit every host has spent what it held; once the
# tenant has been idle for a lease TTL, each host leases back its reserve
# (burst / live agents) from the refilled bucket, so load that then starts
# at one host is admitted from its first SYN, without waiting for a lease.
# Those tokens were debited from the global bucket: the fleet still admits
# at most rate x T + burst + the bound.
@test "200/s, run dry above the limit, idle past the lease TTL, then 75% of the limit at one host: nothing refused, within rate x T + burst + bound" {
	local out=$BATS_TEST_TMPDIR/load.json cold=$BATS_TEST_TMPDIR/cold.json den0 adm0 den adm ref t lim bound leases

	limit_tenant cold 200
	offer "$out" 600 2 1 1 1
	sleep 2.5
	echo "cold: tokens held before: $(fleet_stat 1 cold tokens) $(fleet_stat 2 cold tokens) $(fleet_stat 3 cold tokens)"
	den0=$(fleet_sum cold denied)
	adm0=$(fleet_sum cold admitted)
	# an idle host's low-water mark is its reserve: its first SYN asks
	# for a lease, with the rest of the reserve left while it is on its way
	leases=$(fleet_stat 1 cold leases)
	run_loadgen_json c1 --rate 2 --duration 0.5 "$(lab_target s1 "$PORT")"
	expect_eq "connected after the quiet spell" "$(json_get .total.connected)" 1
	fleet_wait_stat 1 cold leases $((leases + 1)) 2
	offer "$cold" 150 3 1 0 0
	den=$(($(fleet_sum cold denied) - den0))
	adm=$(($(fleet_sum cold admitted) - adm0))
	ref=$(total "$cold" refused)
	t=$(jq -s 'map(.elapsed_s) | max' "$cold")
	lim=$(calc "200 * $t + 20")
	bound=$(fleet_stat 1 cold overshoot_bound)
	echo "cold: $(total "$out" refused) refused above the limit; then $adm admitted in $t s," \
		"$den refused by the kernels, $ref RSTs seen; rate x T + burst = $lim, bound $bound"
	expect_between "connections offered after the quiet spell" "$(total "$cold" attempts)" \
		"$(calc "0.95 * 150 * 3")" 450
	expect_between "SYNs refused by the kernels after the quiet spell" "$den" 0 0
	expect_between "connections refused (RST) after the quiet spell" "$ref" 0 0
	expect_between "admitted after the quiet spell" "$adm" 1 "$(calc "$lim + $bound")"
}
