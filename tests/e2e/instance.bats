#!/usr/bin/env bats
# The host-wide instance limit on one host: one cap over every tenant and
# every client no tenant matches, held by the kernel against long-lived
# connections to nginx, kept across an agent restart (its state file).
# Two tenants are c1's IPv4 and c1's IPv6 prefixes; c2 matches none.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers
load conncap_helpers

setup() {
	agent_setup
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	command -v python3 >/dev/null || skip "python3 is not installed"
}
teardown() { agent_teardown; }

# wait_inst N SECONDS: until the instance counts N in flight.
wait_inst() {
	local i

	for ((i = 0; i < $2 * 10; i++)); do
		[[ $(inst conns) == "$1" ]] && return 0
		sleep 0.1
	done
	expect_eq "instance in flight after $2 s" "$(inst conns)" "$1"
}

@test "an instance cap of 20 holds over two tenants and a client no tenant matches: the unmatched client gets what the tenants leave, a close frees a place for anyone; status, stats, metrics and instance get agree; del lifts it" {
	local page

	agent_start
	nginx_start s1
	rl tenant set four --rate 1000/s --burst 1000 --action rst \
		--match "$(client_prefix c1)" --max-conns 100
	rl tenant set six --rate 1000/s --burst 1000 --action rst \
		--match "2001:db8:1:0:1::/80"
	rl instance set --max-conns 20
	expect_eq "instance get" "$(rl --json instance get | jq -c '[.max_conns, .conns]')" "[20,0]"
	client_start a c1 s1 4
	client_start b c1 s1 6
	client_start u c2 s1 4

	client_do a open 8
	expect_eq "tenant four connected" "$(jq .connected <<<"$REPLY")" 8
	client_do b open 8
	expect_eq "tenant six connected" "$(jq .connected <<<"$REPLY")" 8
	client_do u open 6
	expect_eq "unmatched connected" "$(jq .connected <<<"$REPLY")" 4
	expect_eq "unmatched timed out (dropped)" "$(jq .timed_out <<<"$REPLY")" 2
	expect_eq "instance in flight" "$(inst conns)" 20
	expect_eq "server's connections" "$(server_conns s1)" 20
	expect_eq "tenant four's own count" "$(stat_get four conns)" 8
	expect_eq "refused at the instance cap" "$(inst denied_cap)" 2
	# a tenant is held by the instance's cap as well as its own
	client_do a open 2
	expect_eq "tenant four over the instance cap" "$(jq .connected <<<"$REPLY")" 0
	expect_eq "tenant four's own count, unchanged" "$(stat_get four conns)" 8

	# tenant four closes 5 (both FINs): 5 places, taken by the stranger
	client_do a close 5
	wait_inst 15 2
	expect_eq "tenant four after closing 5" "$(stat_get four conns)" 3
	client_do u open 6
	expect_eq "unmatched connected after the close" "$(jq .connected <<<"$REPLY")" 5
	expect_eq "server's connections" "$(server_conns s1)" 20

	page=$(metrics s1)
	expect_eq "rlgate_instance_limit_conns" "$(metric_value rlgate_instance_limit_conns "$page")" 20
	expect_eq "rlgate_instance_conns" "$(metric_value rlgate_instance_conns "$page")" 20
	expect_eq "rlgate_instance_denied_total{reason=cap}" \
		"$(metric_value 'rlgate_instance_denied_total{reason="cap"}' "$page")" 5
	rl status | grep -q "instance: max-conns 20, 20 in flight" ||
		{ rl status >&2; echo "status does not show the instance limit" >&2; return 1; }
	rl stats | grep -q "instance: max-conns 20, 20 in flight" ||
		{ rl stats >&2; echo "stats does not show the instance limit" >&2; return 1; }
	expect_eq "status --json" "$(rl --json status | jq -c '[.instance.max_conns, .instance.conns]')" "[20,20]"

	rl instance del
	expect_eq "instance get after del" "$(rl --json instance get)" null
	client_do u open 3
	expect_eq "unmatched connected with no instance limit" "$(jq .connected <<<"$REPLY")" 3
	run rl instance del
	expect_eq "exit status of a second del" "$status" 2
	[[ $output == *"Error: no instance limit is set"* ]] || { echo "$output" >&2; return 1; }
	client_do a quit
	client_do b quit
	client_do u quit
}

@test "the instance limit and its count survive an agent restart (state file, adopted pins); a bad instance set is refused naming the value" {
	agent_start
	nginx_start s1
	rl instance set --max-conns 6 --rate 1000/s,2000
	expect_eq "rate and burst" "$(rl --json instance get | jq -c '[.rate, .burst]')" '["1000/s",2000]'
	client_start u c2 s1 4
	client_do u open 6
	expect_eq "connected" "$(jq .connected <<<"$REPLY")" 6

	agent_stop TERM
	agent_start
	expect_eq "after the restart" "$(rl --json instance get | jq -c '[.max_conns, .conns, .rate]')" \
		'[6,6,"1000/s"]'
	client_do u open 2
	expect_eq "connected over the cap after the restart" "$(jq .connected <<<"$REPLY")" 0
	client_do u close 3
	wait_inst 3 2
	client_do u open 4
	expect_eq "connected after closing 3" "$(jq .connected <<<"$REPLY")" 3
	client_do u quit
	wait_inst 0 2

	run rl instance set --max-conns 200000
	expect_eq "exit status of a cap too large" "$status" 2
	[[ $output == *"Error: "*"200000"* ]] || { echo "$output" >&2; return 1; }
	run rl instance set --rate 10/s,0
	expect_eq "exit status of a burst of 0" "$status" 2
	run rl instance set
	expect_eq "exit status of neither cap nor rate" "$status" 2
	[[ $output == *"--max-conns"* ]] || { echo "$output" >&2; return 1; }
}
