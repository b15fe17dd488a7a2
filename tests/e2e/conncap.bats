#!/usr/bin/env bats
# Connection caps on one host: clients holding long-lived connections to a
# real server (nginx) on s1, the kernel counting them in and out - the
# client's FIN and the server's (seen on tc egress), a server's reset - and
# the agent's sweep ending what no packet ends (connections whose socket is
# gone), against the counts the clients and the server's socket table see.

load helpers
load agent_helpers

CAP_PORT=8081

setup() {
	agent_setup
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	command -v python3 >/dev/null || skip "python3 is not installed"
}
teardown() { agent_teardown; }

# nginx_start: nginx on s1:$CAP_PORT (IPv4 and IPv6), one worker, keeping
# idle connections open for a minute.
nginx_start() {
	local d=$BATS_TEST_TMPDIR i

	cat >"$d/nginx.conf" <<CONF
worker_processes 1;
daemon off;
user root;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $d;
	client_header_timeout 60s;
	keepalive_timeout 60s;
	server {
		listen $(lab_addr s1 4):$CAP_PORT;
		listen [$(lab_addr s1 6)]:$CAP_PORT;
		location / { return 200 "ok\n"; }
	}
}
CONF
	in_ns s1 nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" 3>&- &
	for ((i = 0; i < 100; i++)); do
		in_ns s1 ss -Htln "sport = :$CAP_PORT" | grep -q . && return 0
		sleep 0.05
	done
	echo "nginx is not listening on $CAP_PORT:" >&2
	cat "$d/error.log" >&2
	return 1
}

# client_start HOST [4|6]: conn_client.py in HOST against s1:$CAP_PORT,
# driven through a fifo by client_do.
client_start() {
	local d=$BATS_TEST_TMPDIR

	mkfifo "$d/ctl-$1"
	in_ns "$1" python3 "$BATS_TEST_DIRNAME/conn_client.py" "$(lab_addr s1 "${2:-4}")" \
		"$CAP_PORT" "$d/ctl-$1" >"$d/out-$1" 2>"$d/err-$1" 3>&- &
	exec {CTL_FD}>"$d/ctl-$1"
	CLIENT_OUT=$d/out-$1
}

# client_do CMD...: one command to the client; its JSON answer in REPLY.
client_do() {
	local n i

	n=$(wc -l <"$CLIENT_OUT")
	echo "$*" >&"$CTL_FD"
	for ((i = 0; i < 600; i++)); do
		(($(wc -l <"$CLIENT_OUT") > n)) && break
		sleep 0.05
	done
	REPLY=$(tail -n 1 "$CLIENT_OUT")
	[[ -n $REPLY ]] || { echo "no answer from the client" >&2; cat "$BATS_TEST_TMPDIR"/err-* >&2; return 1; }
}

# server_conns: connections s1's kernel holds on $CAP_PORT, not yet closed
# by the server (every state but LISTEN, TIME-WAIT and CLOSED).
server_conns() {
	in_ns s1 ss -Htn state all "sport = :$CAP_PORT" |
		awk '$1 != "LISTEN" && $1 != "TIME-WAIT" && $1 != "UNCONN"' | wc -l
}

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
	nginx_start
	rl tenant set hold --rate 1000/s --burst 1000 --match "$(prefixes c1)" \
		--action rst --max-conns 20
	client_start c1 "$fam"

	client_do open 30
	expect_eq "connected of 30" "$(jq .connected <<<"$REPLY")" 20
	expect_eq "refused of 30" "$(jq .refused <<<"$REPLY")" 10
	expect_eq "in flight (rlctl stats)" "$(stat_get hold conns)" 20
	expect_eq "server's connections" "$(server_conns)" 20
	expect_eq "refused at the cap (rlctl stats)" "$(stat_get hold conn_denied)" 10
	expect_eq "denied (rlctl stats)" "$(stat_get hold denied)" 10

	# The client closes 10; nginx closes its side in turn: both FINs.
	client_do close 10
	wait_conns hold 10 1
	client_do open 15
	expect_eq "connected after closing 10" "$(jq .connected <<<"$REPLY")" 10
	expect_eq "refused after closing 10" "$(jq .refused <<<"$REPLY")" 5
	expect_eq "in flight" "$(stat_get hold conns)" 20
	expect_eq "server's connections" "$(server_conns)" 20

	page=$(metrics s1)
	expect_eq "rlgate_conns" "$(metric_value 'rlgate_conns{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_limit_conns" "$(metric_value 'rlgate_limit_conns{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_conn_slots" "$(metric_value 'rlgate_conn_slots{tenant="hold"}' "$page")" 20
	expect_eq "rlgate_conn_denied_total" \
		"$(metric_value 'rlgate_conn_denied_total{tenant="hold"}' "$page")" 15
	expect_eq "rlgate_conns_closed_total" \
		"$(metric_value 'rlgate_conns_closed_total{tenant="hold"}' "$page")" 10
	expect_eq "tenant get" "$(rl --json tenant get hold | jq -c '[.max_conns, .conns]')" "[20,20]"

	client_do quit
	wait_conns hold 0 2
}

@test "IPv4: a cap of 20 with 30 long-lived connections to nginx: 20 held, 10 refused; closing 10 lets exactly 10 more in; stats, metrics and tenant get agree" {
	cap_holds 4
}

@test "IPv6: a cap of 20 with 30 long-lived connections to nginx: 20 held, 10 refused; closing 10 lets exactly 10 more in; stats, metrics and tenant get agree" {
	cap_holds 6
}

@test "the server resetting its connections (ss -K) gives their places back at once; a connection nobody saw end (its socket gone) is ended by the sweep" {
	agent_start
	nginx_start
	rl tenant set hold --rate 1000/s --burst 1000 --match "$(prefixes c1)" \
		--action rst --max-conns 10
	client_start c1 4
	client_do open 10
	expect_eq "connected" "$(jq .connected <<<"$REPLY")" 10
	# the server aborts 4 connections: RSTs leave through tc egress
	for p in $(in_ns s1 ss -Htn state established "sport = :$CAP_PORT" |
		awk 'NR <= 4 { n = split($4, a, ":"); print a[n] }'); do
		in_ns s1 ss -HtnK state established "( sport = :$CAP_PORT and dport = :$p )" >/dev/null
	done
	wait_conns hold 6 1
	expect_eq "server's connections after the reset" "$(server_conns)" 6

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
		$(($(server_conns) + $(in_ns s1 ss -Htn state all "sport = :8082" |
			awk '$1 != "LISTEN" && $1 != "TIME-WAIT"' | wc -l)))
	expect_between "ended by the sweep" "$(stat_get hold conns_forgotten)" 1 4
	client_do quit
}
