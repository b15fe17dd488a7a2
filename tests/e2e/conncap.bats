#!/usr/bin/env bats
# Connection caps on one host: clients holding long-lived connections to a
# real server (nginx) on s1, the kernel counting them in and out - the
# client's FIN and the server's (seen on tc egress), a server's reset - and
# the agent's sweep ending what no packet ends (connections whose socket is
# gone), against the counts the clients and the server's socket table see.
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

# wait_conns TENANT N SECONDS: until rlctl stats counts N in flight.
wait_conns() {
	local i

	for ((i = 0; i < $3 * 10; i++)); do
		[[ $(stat_get "$1" conns) == "$2" ]] && return 0
		sleep 0.1
	done
	expect_eq "in flight after $3 s" "$(stat_get "$1" conns)" "$2"
}

cap_holds() {
	local fam=$1 page

	agent_start
	nginx_start s1
	rl tenant set hold --rate 1000/s --burst 1000 --match "$(prefixes c1)" \
		--action rst --max-conns 20
	client_start c c1 s1 "$fam"

	client_do c open 30
	expect_eq "connected of 30" "$(jq .connected <<<"$REPLY")" 20
	expect_eq "refused of 30" "$(jq .refused <<<"$REPLY")" 10
	expect_eq "in flight (rlctl stats)" "$(stat_get hold conns)" 20
	expect_eq "server's connections" "$(server_conns s1)" 20
	expect_eq "refused at the cap (rlctl stats)" "$(stat_get hold conn_denied)" 10
	expect_eq "denied (rlctl stats)" "$(stat_get hold denied)" 10

	# The client closes 10; nginx closes its side in turn: both FINs.
	client_do c close 10
	wait_conns hold 10 1
	client_do c open 15
	expect_eq "connected after closing 10" "$(jq .connected <<<"$REPLY")" 10
	expect_eq "refused after closing 10" "$(jq .refused <<<"$REPLY")" 5
	expect_eq "in flight" "$(stat_get hold conns)" 20
	expect_eq "server's connections" "$(server_conns s1)" 20

	page=$(metrics s1)
	expect_eq "rlgate_conns" "$(metric_value 'rlgate_conns{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_limit_conns" "$(metric_value 'rlgate_limit_conns{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_conn_slots" "$(metric_value 'rlgate_conn_slots{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_conn_denied_total" \
		"$(metric_value 'rlgate_conn_denied_total{tenant="hold"}' "$page")" 15
	expect_eq "rlgate_conns_closed_total" \
		"$(metric_value 'rlgate_conns_closed_total{tenant="hold"}' "$page")" 10
	expect_eq "tenant get" "$(rl --json tenant get hold | jq -c '[.max_conns, .conns]')" "[20,20]"

	client_do c quit
	wait_conns hold 0 2
}

@test "IPv4: a cap of 20 with 30 long-lived connections to nginx: 20 held, 10 refused; closing 10 lets exactly 10 more in; stats, metrics and tenant get agree" {
	cap_holds 4
}

@test "IPv6: a cap of 20 with 30 long-lived connections to nginx: 20 held, 10 refused; closing 10 lets exactly 10 more in; stats, metrics and tenant get agree" {
	cap_holds 6
}

@test "a tenant with a cap alone (no rate): the server resetting its connections (ss -K) gives their places back at once; a connection nobody saw end (its socket gone) is ended by the sweep" {
	agent_start
	nginx_start s1
	# a cap alone, no rate: only the cap refuses
	rl tenant set hold --match "$(prefixes c1)" --action rst --max-conns 10
	expect_eq "rate of a tenant created with a cap alone" \
		"$(rl --json tenant get hold | jq -r .rate)" 1000000000/s
	client_start c c1 s1 4
	client_do c open 10
	expect_eq "connected" "$(jq .connected <<<"$REPLY")" 10
	# the server aborts 4 connections: RSTs leave through tc egress
	for p in $(in_ns s1 ss -Htn state established "sport = :$CAP_PORT" |
		awk 'NR <= 4 { n = split($4, a, ":"); print a[n] }'); do
		in_ns s1 ss -HtnK state established "( sport = :$CAP_PORT and dport = :$p )" >/dev/null
	done
	wait_conns hold 6 1
	expect_eq "server's connections after the reset" "$(server_conns s1)" 6

	# connections whose SYN the server never answered: a listener whose
	# accept queue is full drops SYNs without a trace (no socket, no RST)
	rl tenant set hold --max-conns 20
	in_ns s1 python3 -c '
import socket, time
s = socket.socket(); s.bind(("'"$(lab_addr s1 4)"'", 8082)); s.listen(0); time.sleep(60)' 3>&- &
	for ((i = 0; i < 100; i++)); do in_ns s1 ss -Htln "sport = :8082" | grep -q . && break; sleep 0.05; done
	in_ns c1 python3 -c '
import socket
held = []
for _ in range(4):
    s = socket.socket(); s.settimeout(0.3)
    try:
        s.connect(("'"$(lab_addr s1 4)"'", 8082)); held.append(s)
    except OSError:
        s.close()
print(len(held))' >"$BATS_TEST_TMPDIR/backlog.out"
	# until the sweep: the kernel still counts every SYN it admitted
	expect_between "in flight before the sweep" "$(stat_get hold conns)" 7 10
	# then it matches the server's socket table (grace 2 s, sweep every 1 s)
	sleep 4
	expect_eq "in flight after the sweep" "$(stat_get hold conns)" \
		$(($(server_conns s1) + $(server_conns s1 8082)))
	expect_between "ended by the sweep" "$(stat_get hold conns_forgotten)" 1 4
	client_do c quit
}

# egress_filters: rlgate's filters on s1's eth0 egress hook (tc -j lists
# them with their program's name).
egress_filters() {
	tc -n "$(lab_ns s1)" -j filter show dev eth0 egress 2>/dev/null |
		jq '[.[] | select(.options.bpf_name? // "" | startswith("tc_rlgate_egre"))] | length'
}

@test "tc mode (--mode tc): the same cap of 10 holds with the server's FINs seen on tc egress; rlctl detach removes the egress filter too" {
	agent_start --mode tc
	nginx_start s1
	expect_eq "rlgate filters on eth0 egress" "$(egress_filters)" 1
	rl tenant set hold --rate 1000/s --burst 1000 --match "$(prefixes c1)" \
		--action rst --max-conns 10
	client_start c c1 s1 4
	client_do c open 15
	expect_eq "connected of 15" "$(jq .connected <<<"$REPLY")" 10
	expect_eq "refused of 15" "$(jq .refused <<<"$REPLY")" 5
	client_do c close 4
	wait_conns hold 6 1
	expect_eq "closed by the kernel (both FINs)" "$(stat_get hold conns_closed)" 4
	client_do c quit
	wait_conns hold 0 2
	rl detach eth0
	agent_wait_exit 5
	expect_eq "rlgate filters on eth0 egress after detach" "$(egress_filters)" 0
}
