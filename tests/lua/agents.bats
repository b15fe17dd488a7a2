#!/usr/bin/env bats
# heartbeat.lua, agents.lua, deregister.lua: the registry of live agents that
# static-share fallback divides the rate by.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }
setup() { r DEL rl:agents >/dev/null; }

hb() { r EVALSHA "$SHA_heartbeat" 1 rl:agents "$@"; }
count() { r EVALSHA "$SHA_agents" 1 rl:agents; }
dereg() { r EVALSHA "$SHA_deregister" 1 rl:agents "$@"; }

@test "heartbeats from distinct agents are counted, repeats of one agent are not" {
	[ "$(hb host-a 5000)" = 1 ]
	[ "$(hb host-b 5000)" = 2 ]
	[ "$(hb host-a 5000)" = 2 ]
	[ "$(hb host-c 5000)" = 3 ]
	[ "$(count)" = 3 ]
}

@test "the expiry score is Redis time + ttl, and the set expires with its last member" {
	hb host-a 5000 >/dev/null
	t=($(r TIME))
	now_ms=$((t[0] * 1000 + 10#${t[1]} / 1000))
	score=$(r ZSCORE rl:agents host-a)
	((score > now_ms + 4900 && score <= now_ms + 5000))
	hb host-b 60000 >/dev/null
	ttl=$(r PTTL rl:agents)
	((ttl > 59000 && ttl <= 60000))
}

@test "an agent that stops heartbeating is forgotten after its ttl" {
	hb host-a 150 >/dev/null
	[ "$(hb host-b 10000)" = 2 ]
	sleep 0.25
	[ "$(count)" = 1 ]
	[ "$(hb host-b 10000)" = 1 ]
	[ "$(r ZSCORE rl:agents host-a)" = "" ]
}

@test "agents only counts: it drops expired members from the count without writing" {
	now_ms=$(($(redis_now_us) / 1000))
	r ZADD rl:agents $((now_ms - 1)) old $((now_ms + 60000)) live >/dev/null
	[ "$(count)" = 1 ]
	[ "$(r ZCARD rl:agents)" = 2 ]
	[ "$(r DEL rl:agents)" = 1 ]
	[ "$(count)" = 0 ]
}

@test "deregister removes the agent at once and returns the live count" {
	hb host-a 60000 >/dev/null
	hb host-b 60000 >/dev/null
	[ "$(dereg host-a)" = 1 ]
	[ "$(count)" = 1 ]
	[ "$(dereg host-a)" = 1 ]
	[ "$(dereg host-b)" = 0 ]
	[ "$(r EXISTS rl:agents)" = 0 ]
}

@test "bad heartbeat arguments are rejected and register nothing" {
	for a in "host-a 0" "host-a -5" "host-a 1.5" "host-a x" "host-a 86400001" "host-a" "'' 100"; do
		eval "set -- $a"
		out=$(hb "$@" 2>&1)
		[[ $out == *"ERR rlgate: bad "* ]] || { echo "ARGV '$a' gave: $out"; return 1; }
	done
	long=$(printf 'x%.0s' {1..257})
	[[ $(hb "$long" 100 2>&1) == *"bad agent id"* ]]
	[[ $(dereg "" 2>&1) == *"bad agent id"* ]]
	[ "$(r EXISTS rl:agents)" = 0 ]
}
