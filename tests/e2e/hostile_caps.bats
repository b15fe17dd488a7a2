#!/usr/bin/env bats
# A hostile client against connection caps and the instance limit: it holds
# real connections to nginx on s1 and forges, on their own 4-tuples, the
# segments a server's TCP stack ignores - RSTs off the sequence number the
# server expects (inside the window: a challenge ACK; far past it; one
# before it), a FIN out of order, a SYN with a new ISN (a challenge ACK) -
# hoping to be counted out while it keeps every connection.  The count must
# stay what the server holds, and the cap keep refusing.  Controls: a close
# (FINs) and an abort (the client kernel's own RST) still free their places
# at once.  conn_client.py forges with scapy from c1's own address.  And
# SYNs forged from sources no tenant matches, or through one tenant, which
# the server keeps as request sockets for a minute, must hold no place of
# the instance limit.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers
load conncap_helpers

CLIENT_PYTHON=/usr/bin/python3	# Debian's, where python3-scapy is installed

setup_file() {
	e2e_require_root || return 0
	"$CLIENT_PYTHON" -c 'import scapy.layers.inet' 2>/dev/null || {
		echo "$CLIENT_PYTHON cannot import scapy: run tools/deps.sh (python3-scapy)" >&2
		return 1
	}
}

setup() {
	agent_setup
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
}
teardown() { agent_teardown; }

# wait_count WHAT WANT SECONDS: until WHAT (a command printing a count)
# prints WANT, then checks it.
wait_count() {
	local i

	for ((i = 0; i < $3 * 10; i++)); do
		[[ $($1) == "$2" ]] && break
		sleep 0.1
	done
	expect_eq "$1 after at most $3 s" "$($1)" "$2"
}

# hold_three TENANT_OPTION...: nginx on s1, tenant "hold" on c1's prefixes
# with action rst and TENANT_OPTION..., and client c holding 3 connections
# to s1 (the agent started).
hold_three() {
	nginx_start s1
	rl tenant set hold --match "$(prefixes c1)" --action rst "$@"
	client_start c c1 s1 4
	client_do c open 3
	expect_eq "connected" "$(jq .connected <<<"$REPLY")" 3
}

tenant_conns() { stat_get hold conns; }
inst_conns() { inst conns; }

# forged_then_held WHAT COUNT: client c forges on each of its 3 connections
# (WHAT: forge, or forgesyn), which the server still answers afterwards (a
# round trip on each, behind the forged segments on the same path); COUNT
# (a command) still says 3, and the server's socket table too.
forged_then_held() {
	local what=$1 count=$2 per=1

	[[ $what == forge ]] && per=5
	client_do c "$what" 3
	expect_eq "segments forged" "$(jq .forged <<<"$REPLY")" $((3 * per))
	client_do c ask
	expect_eq "connections the server still answers" "$(jq .answered <<<"$REPLY")" 3
	expect_eq "server's connections" "$(server_conns s1)" 3
	expect_eq "$count after the forged segments" "$($count)" 3
}

# ends_free COUNT: the controls - the client closes one connection (FINs)
# and aborts another (its kernel's RST): each frees its place at once, and
# two new connections take them.
ends_free() {
	local count=$1

	client_do c close 1
	wait_count "$count" 2 5
	client_do c abort 1
	wait_count "$count" 1 5
	client_do c open 2
	expect_eq "connected once two ended" "$(jq .connected <<<"$REPLY")" 2
	expect_eq "$count" "$($count)" 3
}

@test "forged RSTs, an out-of-order FIN and a new-ISN SYN on a client's own connections free no place of its --max-conns 3: the server keeps all 3, 3 more are refused; a close and an abort still free theirs" {
	agent_start
	hold_three --rate 1000/s --burst 1000 --max-conns 3
	forged_then_held forge tenant_conns
	client_do c open 3
	expect_eq "connected past the cap after forging" "$(jq .connected <<<"$REPLY")" 0
	expect_eq "refused at the cap" "$(jq .refused <<<"$REPLY")" 3
	expect_eq "closed by the kernel (conns_closed)" "$(stat_get hold conns_closed)" 0
	ends_free tenant_conns
	client_do c quit
}

@test "a new-ISN SYN on a held connection, refused by an empty bucket, frees no place (cap 3, burst 3 at 1/h)" {
	agent_start
	hold_three --rate 1/h --burst 3 --max-conns 3
	forged_then_held forgesyn tenant_conns
	expect_eq "denied (the forged SYNs, by the bucket)" "$(stat_get hold denied)" 3
	client_do c quit
}

@test "the instance limit (instance set --max-conns 3, the tenant without a cap of its own): forged RSTs, FIN and new-ISN SYNs free none of its places; a close and an abort still free theirs" {
	agent_start
	rl instance set --max-conns 3
	hold_three --rate 1000/s --burst 1000
	forged_then_held forge inst_conns
	client_do c open 3
	expect_eq "connected past the instance's cap after forging" \
		"$(jq .connected <<<"$REPLY")" 0
	ends_free inst_conns
	client_do c quit
}

# wait_at_least WHAT N SECONDS: until WHAT (a command printing a count)
# prints N or more, then checks it.
wait_at_least() {
	local i

	for ((i = 0; i < $3 * 10; i++)); do
		(($($1) >= $2)) && return 0
		sleep 0.1
	done
	expect_eq "$1 at least $2 after $3 s" "$($1)" "$2 or more"
}

# syn_recv HOST: request sockets HOST's kernel holds on $CAP_PORT.
syn_recv() {
	in_ns "$1" ss -Htn state syn-recv "sport = :$CAP_PORT" | wc -l
}

# established HOST: connections HOST's kernel has made on $CAP_PORT.
established() {
	in_ns "$1" ss -Htn state established "sport = :$CAP_PORT" | wc -l
}

# spoof_unanswered N: client u (on c2) forges N SYNs to s1 from the other
# addresses of c2's /28; the server's SYN-ACKs to them leave for a MAC no
# host holds: nobody answers, and the server retransmits them for a
# minute, as to a forged source on the Internet (an address that fails
# ARP would have its request socket dropped within seconds).
spoof_unanswered() {
	local i

	for ((i = 2; i < 15; i++)); do
		ip -n "$(lab_ns s1)" neigh replace "192.0.2.$((80 + i))" \
			lladdr 02:00:00:00:00:01 dev eth0 nud permanent
	done
	client_do u spoof "$1"
	expect_eq "SYNs forged" "$(jq .forged <<<"$REPLY")" "$1"
	wait_at_least "syn_recv s1" 10 5
}

@test "30 SYNs forged from sources no tenant matches, held by the server as request sockets, take no place of the instance limit (max-conns 10): a tenant's real client connects; an honest unmatched client still counts, and is refused at the cap" {
	agent_start
	nginx_start s1
	rl instance set --max-conns 10
	rl tenant set hold --match "$(prefixes c1)" --action rst \
		--rate 1000/s --burst 1000
	client_start u c2 s1 4
	spoof_unanswered 30

	client_start c c1 s1 4
	client_do c open 3
	expect_eq "the tenant's client connected" "$(jq .connected <<<"$REPLY")" 3
	expect_eq "request sockets of the forged SYNs" "$(syn_recv s1)" 30
	expect_eq "instance in flight" "$(inst conns)" 3
	# the control: an honest client no tenant matches takes the rest
	client_do u open 8
	expect_eq "unmatched connected" "$(jq .connected <<<"$REPLY")" 7
	expect_eq "unmatched timed out (dropped at the cap)" \
		"$(jq .timed_out <<<"$REPLY")" 1
	expect_eq "instance in flight at the cap" "$(inst conns)" 10
	expect_eq "server's connections" "$(established s1)" 10
	client_do c open 1
	expect_eq "the tenant's client refused at the cap" \
		"$(jq .refused <<<"$REPLY")" 1
	# a close of the stranger frees a place for the tenant
	client_do u close 1
	wait_count inst_conns 9 5
	client_do c open 1
	expect_eq "the tenant's client after the close" \
		"$(jq .connected <<<"$REPLY")" 1
	client_do c quit
	client_do u quit
}

@test "30 SYNs forged through one tenant with a generous rate (1000/s) and a cap of its own (40), held by the server as request sockets, fill its own places and none of the instance limit (max-conns 10): another tenant's real client connects; the first tenant's honest client still counts, and is refused at the cap" {
	agent_start
	nginx_start s1
	rl instance set --max-conns 10
	rl tenant set flood --match "$(prefixes c2)" --action rst \
		--rate 1000/s --burst 1000 --max-conns 40
	rl tenant set hold --match "$(prefixes c1)" --action rst \
		--rate 1000/s --burst 1000
	client_start u c2 s1 4
	spoof_unanswered 30
	expect_eq "the flooding tenant's own places" "$(stat_get flood conns)" 30
	expect_eq "instance in flight after the flood" "$(inst conns)" 0

	client_start c c1 s1 4
	client_do c open 3
	expect_eq "the other tenant's client connected" \
		"$(jq .connected <<<"$REPLY")" 3
	expect_eq "request sockets of the forged SYNs" "$(syn_recv s1)" 30
	expect_eq "instance in flight" "$(inst conns)" 3
	# the control: the flooding tenant's honest client takes the rest
	client_do u open 8
	expect_eq "flooding tenant's client connected" \
		"$(jq .connected <<<"$REPLY")" 7
	expect_eq "flooding tenant's client refused at the cap (its action rst)" \
		"$(jq .refused <<<"$REPLY")" 1
	expect_eq "instance in flight at the cap" "$(inst conns)" 10
	expect_eq "the flooding tenant's places" "$(stat_get flood conns)" 37
	expect_eq "server's connections" "$(established s1)" 10
	client_do c open 1
	expect_eq "the other tenant's client refused at the cap" \
		"$(jq .refused <<<"$REPLY")" 1
	# a close of the flooding tenant's client frees a place for the other
	client_do u close 1
	wait_count inst_conns 9 5
	client_do c open 1
	expect_eq "the other tenant's client after the close" \
		"$(jq .connected <<<"$REPLY")" 1
	client_do c quit
	client_do u quit
}
