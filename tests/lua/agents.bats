#!/usr/bin/env bats
# heartbeat.lua, agents.lua, deregister.lua: the registry of live agents that
# static-share fallback divides the rate by.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }
setup() { r DEL rl:agents rl:agent_ids >/dev/null; }

# Nonces: one per running agent.
NA=aaaaaaaaaaaaaaaa
NB=bbbbbbbbbbbbbbbb
NC=cccccccccccccccc

# hb ID TTL [NONCE [FIRST]]: a heartbeat, printed as "live other" (other
# "-" when empty).  The nonce defaults to one per id, first to 0.
hb() {
	local n=${3:-$(printf '%s' "$1" | md5sum | cut -c1-16)} out

	out=$(r EVALSHA "$SHA_heartbeat" 2 rl:agents rl:agent_ids "$1" "$2" "$n" "${4:-0}") ||
		return 1
	[[ $out == ERR* ]] && { echo "$out"; return 0; }
	mapfile -t o <<<"$out"
	echo "${o[0]} ${o[1]:--}"
}
count() { r EVALSHA "$SHA_agents" 1 rl:agents; }
dereg() { r EVALSHA "$SHA_deregister" 2 rl:agents rl:agent_ids "$@"; }

@test "heartbeats from distinct agents are counted, repeats of one agent are not" {
	[ "$(hb host-a 5000)" = "1 -" ]
	[ "$(hb host-b 5000)" = "2 -" ]
	[ "$(hb host-a 5000)" = "2 -" ]
	[ "$(hb host-c 5000)" = "3 -" ]
	[ "$(count)" = 3 ]
}

@test "the expiry score is Redis time + ttl, and both keys expire with the last member" {
	t0=$(redis_now_us)
	hb host-a 5000 $NA >/dev/null
	t1=$(redis_now_us)
	expiry_within host-a/$NA "$(r ZSCORE rl:agents host-a/$NA)" 5000 "$t0" "$t1"
	[ "$(r HGET rl:agent_ids host-a)" = $NA ]
	t0=$(redis_now_us)
	hb host-b 60000 >/dev/null
	t1=$(redis_now_us)
	expires_in rl:agents 60000 "$t0" "$t1"
	expires_in rl:agent_ids 60000 "$t0" "$t1"
}

# stops TTL: host-a heartbeats once with TTL; host-b's heartbeat counts it
# while it is live (else, when the machine stalled past TTL first, 2: see
# retry_stalled), and it is gone once TTL has passed.
stops() {
	local t0 o score out t1

	r DEL rl:agents rl:agent_ids >/dev/null
	t0=$(redis_now_us)
	mapfile -t o < <(atomically "EVALSHA $SHA_heartbeat 2 rl:agents rl:agent_ids host-a $1 $NA 0" \
		"ZSCORE rl:agents host-a/$NA")
	[ "${o[0]}" = 1 ] || return 1
	score=${o[2]}
	expiry_within host-a/$NA "$score" "$1" "$t0" "${o[3]}" || return 1
	out=$(hb host-b 60000)
	t1=$(redis_now_us)
	if [ "$out" != "2 -" ]; then
		live_until host-a/$NA "$score" "$t1" || return
		echo "host-b's heartbeat counted '$out' while host-a was live"
		return 1
	fi
	sleep_ms $(($1 + 100))
	[ "$(count)" = 1 ] || return 1
	[ "$(hb host-b 60000)" = "1 -" ] || return 1
	[ "$(r ZSCORE rl:agents host-a/$NA)" = "" ] || return 1
	[ "$(r HEXISTS rl:agent_ids host-a)" = 0 ] || return 1
	# and coming back later is not reported as another agent
	[ "$(hb host-a 5000 $NC)" = "2 -" ]
}

@test "an agent that stops heartbeating is forgotten after its ttl, its id with it" {
	retry_stalled stops 150
}

@test "two agents with one id are counted apart, and each hears of the other at its next heartbeat" {
	[ "$(hb dup 5000 $NA 1)" = "1 -" ]
	[ "$(hb dup 5000 $NA)" = "1 -" ]
	[ "$(hb other 5000)" = "2 -" ]
	# a second host with the same name: its first heartbeat takes the id
	# over, and its first regular one finds the first host back
	[ "$(hb dup 5000 $NB 1)" = "2 $NA" ]
	[ "$(hb dup 5000 $NA)" = "3 $NB" ]
	[ "$(hb dup 5000 $NB)" = "3 $NA" ]
	[ "$(hb dup 5000 $NA)" = "3 $NB" ]
	[ "$(count)" = 3 ]
	[ "$(r ZCOUNT rl:agents -inf +inf)" = 3 ]
}

@test "a restarted agent (new nonce, first heartbeat) replaces its killed predecessor at once: counted once" {
	hb host-a 5000 $NA 1 >/dev/null
	hb host-a 5000 $NA >/dev/null
	hb host-b 5000 >/dev/null
	# host-a killed, its entry still live; the new agent's first heartbeat
	[ "$(hb host-a 5000 $NB 1)" = "2 $NA" ]
	[ "$(r ZSCORE rl:agents host-a/$NA)" = "" ]
	[ "$(hb host-a 5000 $NB)" = "2 -" ]
	[ "$(count)" = 2 ]
}

@test "agents only counts: it drops expired members from the count without writing" {
	now_ms=$(($(redis_now_us) / 1000))
	r ZADD rl:agents $((now_ms - 1)) old/$NA $((now_ms + 60000)) live/$NB >/dev/null
	[ "$(count)" = 1 ]
	[ "$(r ZCARD rl:agents)" = 2 ]
	[ "$(r DEL rl:agents)" = 1 ]
	[ "$(count)" = 0 ]
}

@test "deregister removes the agent at once, returns the live count, and leaves another agent's claim to the id alone" {
	hb host-a 60000 $NA >/dev/null
	hb host-b 60000 $NB >/dev/null
	[ "$(dereg host-a $NA)" = 1 ]
	[ "$(count)" = 1 ]
	[ "$(r HEXISTS rl:agent_ids host-a)" = 0 ]
	[ "$(dereg host-a $NA)" = 1 ]
	# two agents with id dup: the one that goes leaves the other's entry
	hb dup 60000 $NA 1 >/dev/null
	hb dup 60000 $NC 1 >/dev/null
	hb dup 60000 $NA >/dev/null
	[ "$(count)" = 3 ]
	[ "$(dereg dup $NC)" = 2 ]
	[ "$(r HGET rl:agent_ids dup)" = $NA ]
	[ "$(dereg dup $NA)" = 1 ]
	[ "$(dereg host-b $NB)" = 0 ]
	[ "$(r EXISTS rl:agents)" = 0 ]
}

@test "bad heartbeat arguments are rejected and register nothing" {
	for a in "host-a 0" "host-a -5" "host-a 1.5" "host-a x" "host-a 86400001" "host-a" "'' 100" \
		"host-a 100 short" "host-a 100 AAAAAAAAAAAAAAAA" "host-a 100 aaaaaaaaaaaaaaaaa" \
		"host-a 100 $NA 2" "host-a 100 $NA ''"; do
		eval "set -- $a"
		out=$(r EVALSHA "$SHA_heartbeat" 2 rl:agents rl:agent_ids "$@" 2>&1)
		[[ $out == *"ERR rlgate: bad "* ]] || { echo "ARGV '$a' gave: $out"; return 1; }
	done
	long=$(printf 'x%.0s' {1..257})
	[[ $(hb "$long" 100 2>&1) == *"bad agent id"* ]]
	[[ $(dereg "" $NA 2>&1) == *"bad agent id"* ]]
	[[ $(dereg host-a 2>&1) == *"bad nonce"* ]]
	[[ $(r EVALSHA "$SHA_heartbeat" 1 rl:agents host-a 100 $NA 0 2>&1) == *"takes 2 keys"* ]]
	[ "$(r EXISTS rl:agents rl:agent_ids)" = 0 ]
}
