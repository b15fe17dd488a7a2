#!/usr/bin/env bats
# Properties of the script files themselves: contracts documented, shared
# math in sync, key layout, and the NOSCRIPT path the agent relies on.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

@test "every script starts with a header comment stating KEYS, ARGV and Returns" {
	for f in "$TOP"/lua/*.lua; do
		head -1 "$f" | grep -q "^-- $(basename "$f"): " || { echo "$f: first line"; return 1; }
		hdr=$(sed -n '/^--/!q;p' "$f")
		for w in KEYS ARGV Returns; do
			grep -q "^-- $w" <<<"$hdr" || { echo "$f: no $w in header"; return 1; }
		done
	done
}

@test "the common code (argument checks, bucket math) is identical in lease.lua and refund.lua" {
	a=$(sed -n '/common: begin/,/common: end/p' "$TOP/lua/lease.lua")
	b=$(sed -n '/common: begin/,/common: end/p' "$TOP/lua/refund.lua")
	[ -n "$a" ]
	[ "$a" = "$b" ]
}

@test "a bucket and a policy of one tenant share a hash tag (one cluster slot)" {
	k=$(bucket)
	lease "$k" 1 1 1 0 1 >/dev/null
	r EVALSHA "$SHA_policy_set" 1 'rl:{t:test3}:policy' test3 1 '{}' 1000 >/dev/null
	[ "$(r KEYS 'rl:{t:test3}:*' | sort | paste -sd' ')" = 'rl:{t:test3}:bucket rl:{t:test3}:policy' ]
}

@test "after SCRIPT FLUSH EVALSHA answers NOSCRIPT and a reload gives the same SHA" {
	r SCRIPT FLUSH >/dev/null
	run r EVALSHA "$SHA_lease" 1 "$(bucket)" 1 1 1 0 1
	[[ $output == NOSCRIPT* ]]
	[ "$(r SCRIPT LOAD "$(cat "$TOP/lua/lease.lua")")" = "$SHA_lease" ]
	[ "$(lease "$(bucket)" 1 1 1 0 1)" = "0 1 0" ]
	for f in "$TOP"/lua/*.lua; do r SCRIPT LOAD "$(cat "$f")" >/dev/null; done
}

@test "stored counters are plain integers that the script reads back unchanged" {
	k=$(bucket)
	lease "$k" 999999999 1 100000000 99999999 1 >/dev/null
	for f in tokens frac ts; do
		[[ $(field "$k" "$f") =~ ^[0-9]+$ ]] || { echo "$f: $(field "$k" "$f")"; return 1; }
	done
}

@test "agents.lua and policy_get.lua run read-only (EVALSHA_RO, answerable by a replica)" {
	[ "$(r EVALSHA_RO "$SHA_agents" 1 rl:agents)" = 0 ]
	[ "$(r EVALSHA_RO "$SHA_policy_get" 1 'rl:{t:ro}:policy' | head -1)" = 0 ]
	run r EVALSHA_RO "$SHA_lease" 1 "$(bucket)" 1 1 1 1 1
	[[ $output == *"not allowed from read-only scripts"* ]]
}
