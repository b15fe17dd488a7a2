#!/usr/bin/env bats
# The scripts on a Redis Cluster: every call the agent makes in Cluster mode
# names keys of one hash slot (a cluster refuses any other), and the key
# names that a single Redis may mix across slots are named apart on a
# cluster (docs/redis.md, "Keys on a Redis Cluster").

load helpers

setup_file() { redis_start cluster; }
teardown_file() { redis_stop; }

slot() { r CLUSTER KEYSLOT "$1"; }

@test "a tenant's bucket and policy share one slot, whatever its name" {
	for t in acme a A-1 x.y_z 0 "$(printf 'n%.0s' {1..63})"; do
		[ "$(slot "rl:{t:$t}:bucket")" = "$(slot "rl:{t:$t}:policy")" ] ||
			{ echo "tenant $t"; return 1; }
		[ "$(slot "rl:{t:$t}:bucket")" = "$(slot "t:$t")" ]
	done
}

@test "a split tenant's sub-buckets rl:{t:NAME#i}:bucket are on slots of their own, none the whole tenant's" {
	local t i slots

	for t in hot acme web; do
		slots=$(for i in 0 1 2; do slot "rl:{t:$t#$i}:bucket"; done)
		[ "$(sort -u <<<"$slots" | wc -l)" = 3 ] || { echo "$t: $slots"; return 1; }
		if grep -qx "$(slot "rl:{t:$t}:bucket")" <<<"$slots"; then
			echo "$t: a sub-bucket on the whole tenant's slot: $slots"
			return 1
		fi
	done
	# as tests/e2e/cluster.bats counts on: hot's are on three masters of
	# a fresh three-master cluster (0-5460, 5461-10922, 10923-16383)
	[ "$(for i in 0 1 2; do slot "rl:{t:hot#$i}:bucket"; done | paste -sd' ')" = "7114 3051 15240" ]
}

@test "lease and refund on the sub-buckets of a 100/s burst 20 tenant split 3 ways: 7 + 7 + 6 tokens, the whole burst" {
	local i got=0 g

	for i in 0 1 2; do
		# hot.c's shares: rate 34/33/33, burst 7/7/6
		read -r g _ _ <<<"$(lease "rl:{t:split#$i}:bucket" $((33 + (i < 1))) 1 \
			$((6 + (i < 2))) 20 1)"
		[ "$g" = $((6 + (i < 2))) ]
		got=$((got + g))
	done
	[ "$got" = 20 ]
	# a refund fills its own sub-bucket, never beyond that one's burst
	[ "$(refund 'rl:{t:split#2}:bucket' 33 1 6 10)" = 6 ]
}

@test "the cluster registry's two keys share one slot; the single-Redis names do not" {
	[ "$(slot 'rl:{registry}:agents')" = "$(slot 'rl:{registry}:agent_ids')" ]
	[ "$(slot 'rl:agents')" != "$(slot 'rl:agent_ids')" ]
}

@test "lease and refund run on a cluster" {
	[ "$(lease 'rl:{t:acme}:bucket' 10 1 10 4 1)" = "4 6 0" ]
	[ "$(refund 'rl:{t:acme}:bucket' 10 1 10 4)" = "10" ]
}

@test "policy_set with the policy key alone, and policy_get, run on a cluster" {
	run r EVALSHA "$SHA_policy_set" 1 'rl:{t:acme}:policy' acme 5 '{"x":1}' 1000
	[ "$(paste -sd' ' <<<"$output")" = "1 5" ]
	[ "$(r EVALSHA "$SHA_policy_get" 1 'rl:{t:acme}:policy' | paste -sd' ')" = '5 {"x":1}' ]
	[ "$(r SADD rl:tenants acme)" = 1 ]
}

@test "policy_set with rl:tenants as a second key is refused on a cluster (CROSSSLOT)" {
	run r EVALSHA "$SHA_policy_set" 2 'rl:{t:beta}:policy' rl:tenants beta 5 '{}' 1000
	[[ $output == CROSSSLOT* ]]
	[ "$(r EVALSHA "$SHA_policy_get" 1 'rl:{t:beta}:policy' | paste -sd' ')" = '0 ' ]
}

@test "heartbeat, agents and deregister run with the cluster registry keys" {
	n=0123456789abcdef
	run r EVALSHA "$SHA_heartbeat" 2 'rl:{registry}:agents' 'rl:{registry}:agent_ids' \
		host1 3000 "$n" 1
	[ "${lines[0]}" = 1 ]
	[ "${#lines[@]}" = 1 ]
	[ "$(r EVALSHA "$SHA_agents" 1 'rl:{registry}:agents')" = 1 ]
	[ "$(r EVALSHA "$SHA_deregister" 2 'rl:{registry}:agents' \
		'rl:{registry}:agent_ids' host1 "$n")" = 0 ]
}

@test "heartbeat with the single-Redis registry keys is refused on a cluster (CROSSSLOT)" {
	run r EVALSHA "$SHA_heartbeat" 2 rl:agents rl:agent_ids host1 3000 0123456789abcdef 1
	[[ $output == CROSSSLOT* ]]
	[ "$(r EXISTS rl:agents)" = 0 ]
	[ "$(r EXISTS rl:agent_ids)" = 0 ]
}

@test "slots runs on a cluster: a tenant's two connection-slot keys share its slot" {
	[ "$(slot 'rl:{t:acme}:slots')" = "$(slot 'rl:{t:acme}:slot_exp')" ]
	[ "$(slot 'rl:{t:acme}:slots')" = "$(slot 'rl:{t:acme}:bucket')" ]
	run r EVALSHA "$SHA_slots" 2 'rl:{t:acme}:slots' 'rl:{t:acme}:slot_exp' 10 host1/0123456789abcdef 4 3000
	[ "$(paste -sd' ' <<<"$output")" = "4 6" ]
}
