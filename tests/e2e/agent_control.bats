#!/usr/bin/env bats
# rlagent's control socket and metrics endpoint on a running agent: bad rlctl
# input exits 2 and changes nothing, garbage on the socket neither crashes
# the agent nor changes the policy, and /metrics serves the per-tenant
# metrics with the same numbers as rlctl stats.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() {
	agent_teardown
	[[ -z ${RUN_DIR:-} ]] || rm -rf "$RUN_DIR"
}

# The connection holder of the tests below: `python3 -c "$HOLD_PY" unix
# PATH N SECONDS` opens N connections one after the other, each asking for
# the agent's version and waiting for the answer (an answer: held; the
# connection closed instead: refused), so what it counts does not depend on
# how fast a loaded agent accepts; `tcp HOST:PORT N SECONDS` opens N and
# asks nothing.  A second after the last, it prints how many it holds, then
# holds them SECONDS, idle.
HOLD_PY='
import socket, sys, time
kind, addr, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
socks = []
held = 0
for i in range(n):
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(addr)
        s.settimeout(60)
        try:
            s.sendall(b"{\"cmd\":\"version\"}\n")
            held += 1 if s.recv(4096) else 0
        except OSError:
            pass
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        held += 1
    socks.append(s)
time.sleep(1)
print(held, flush=True)
time.sleep(secs)
'

# metrics_conns: the connections to /metrics the agent has accepted.
metrics_conns() {
	in_ns s1 ss -tnHp state established "( sport = :${METRICS_ADDR##*:} )" |
		grep -c "pid=$AGENT_PID," || true
}

# held_by OUT: the count a holder printed into OUT (60 s at most).
held_by() {
	local n

	for ((n = 0; n < 1200; n++)); do
		[[ -s $1 ]] && { head -n 1 "$1"; return 0; }
		sleep 0.05
	done
	echo "the connection holder printed nothing: $(cat "$1.err" 2>/dev/null)" >&2
	return 1
}

# ctl_send: stdin to the agent's control socket as one client, which then
# shuts its side; prints the replies until the agent closes (10 s at most).
ctl_send() {
	timeout 10 nc -U -N "$CTL"
}

# agent_conns: the agent's open control connections.  The agent's end of a
# connection is in the client's network namespace (this shell's), not in
# the one of the socket it listens on.
agent_conns() {
	ss -xHp state established | grep -F "$CTL" | grep -c "pid=$AGENT_PID," || true
}

# expect_usage_error ARGS...: rlctl ARGS exits 2 and the policy is what it
# was ($POLICY).
expect_usage_error() {
	local out rc=0

	out=$(rl "$@" 2>&1) || rc=$?
	if ((rc != 2)); then
		echo "rlctl $*: exit $rc, expected 2; output: $out" >&2
		return 1
	fi
	expect_eq "policy after 'rlctl $*'" "$(tenants_json)" "$POLICY"
}

# fail MESSAGE: fails the test, saying why.
fail() {
	echo "$*" >&2
	return 1
}

@test "bad rlctl input (rate, prefix, port, burst beyond the clock, unknown tenant, conflict) exits 2 and changes nothing" {
	local c1 out file=$BATS_TEST_TMPDIR/policy.json

	agent_start
	c1=$(prefixes c1)
	rl tenant set web --rate 50/s --burst 10 --match "$c1" --port 8080 --action rst
	rl tenant set api --rate 5/s --match 198.51.100.0/24
	POLICY=$(tenants_json)

	# malformed values, caught by rlctl
	expect_usage_error tenant set new --rate 10 --match 198.51.100.0/25
	expect_usage_error tenant set new --rate 0/s --match 198.51.100.0/25
	expect_usage_error tenant set new --rate 1.5/s --match 198.51.100.0/25
	expect_usage_error tenant set new --rate 10/d --match 198.51.100.0/25
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.1/24
	expect_usage_error tenant set new --rate 10/s --match 300.1.2.0/24
	expect_usage_error tenant set new --rate 10/s --match 2001:db8::/129
	expect_usage_error tenant set new --rate 10/s --match nonsense
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.0/25 --port 0
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.0/25 --port 65536
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.0/25 --port 80,80
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.0/25 --action reject
	expect_usage_error tenant set new --rate 10/s --match 198.51.100.0/25 --burst 0
	expect_usage_error tenant set 'bad name' --rate 10/s --match 198.51.100.0/25
	expect_usage_error tenant set new --match 198.51.100.0/25
	# a bucket whose refill time would wrap the kernel's 64-bit clock
	expect_usage_error tenant set new --rate 1/h --burst 5124096 --match 198.51.100.0/25
	expect_usage_error tenant set api --rate 1/h --burst 1281024
	out=$(rl tenant set new --rate 1/h --burst 5124096 --match 198.51.100.0/25 2>&1) || true
	[[ $out == *"burst 5124096"* && $out == *"at most 1281023"* ]] ||
		{ echo "the refusal names neither the burst nor the limit: $out" >&2; return 1; }
	# an update of an existing tenant with one bad value changes none of it
	expect_usage_error tenant set web --rate 10/s --port 99999
	expect_usage_error tenant set web --burst -1
	# unknown tenant or interface, known only to the agent
	expect_usage_error tenant get nosuch
	expect_usage_error tenant del nosuch
	expect_usage_error stats nosuch
	expect_usage_error detach nosuch0
	# conflicts with another tenant's rules, known only to the agent
	expect_usage_error tenant set other --rate 10/s --match "$c1" --port 8080
	expect_usage_error tenant set other --rate 10/s --match 198.51.100.0/24
	expect_usage_error tenant set api --port 8080 --match "$c1"
	# a policy file with one bad tenant applies none of it
	cat >"$file" <<EOF
{"tenants": [{"name": "web", "rate": "1/s", "match": ["$(cut -d, -f1 <<<"$c1")"]},
             {"name": "x", "rate": "1/s", "match": ["198.51.100.0/24"], "prots": [80]}]}
EOF
	expect_usage_error apply "$file"

	# and the program still enforces the untouched policy
	run_loadgen_json c1 --rate 100 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_near "connected under web (50/s burst 10)" "$(json_get .total.connected)" \
		"$(expected 50 1 10)" 10
}

@test "garbage on the control socket (random bytes, oversized line, bad JSON, half lines) leaves the agent serving, policy unchanged" {
	local i n replies half_pid start conns

	agent_start
	rl tenant set web --rate 50/s --burst 10 --match "$(prefixes c1)" --action rst
	POLICY=$(tenants_json)

	# a client that sends half a request and then nothing: the agent must
	# not wait for it, and drops it after 10 s (nc keeps the connection
	# open after its input ends, and exits once the agent closes it)
	printf '{"cmd":"tenant.del","name":"we' | nc -U "$CTL" >/dev/null 3>&- &
	half_pid=$!
	start=$SECONDS

	# random bytes, with and without newlines
	for i in 1 2 3; do
		head -c 4096 /dev/urandom | ctl_send >/dev/null || true
	done
	head -c 100000 /dev/urandom | tr -d '\n' | ctl_send >/dev/null || true
	# an oversized line, with and without its newline
	{ head -c 70000 /dev/zero | tr '\0' a; echo; } | ctl_send >/dev/null || true
	{ printf '{"cmd":"status","pad":"'; head -c 70000 /dev/zero | tr '\0' a; } |
		ctl_send >/dev/null || true
	# half a line, then disconnect
	printf '{"cmd":"tenant.del","name":"web"' | ctl_send >/dev/null || true
	printf '{"cmd":"tenant.set","tenant":{"name":"half","rate":"1/s","match":["10.0.0.0/8"]}' |
		ctl_send >/dev/null || true

	# well-framed lines with bad content: one error reply each, same connection
	local bad=(
		'not json'
		'[]'
		'{}'
		'null'
		'{"cmd":42}'
		'{"cmd":"nosuch"}'
		'{"cmd":"tenant.set"}'
		'{"cmd":"tenant.set","tenant":"web"}'
		'{"cmd":"tenant.set","tenant":{"name":"web","rate":"-5/s","match":["192.0.2.64/28"]}}'
		'{"cmd":"tenant.set","tenant":{"name":"web","rate":"5/s","match":["192.0.2.64/33"]}}'
		'{"cmd":"tenant.set","tenant":{"name":"web","rate":"5/s","match":"192.0.2.64/28"}}'
		'{"cmd":"tenant.set","tenant":{"name":"web","rate":"5/s","burst":1e99,"match":["192.0.2.64/28"]}}'
		'{"cmd":"tenant.set","tenant":{"name":"web","rate":"5/s","match":["192.0.2.64/28"],"ports":[0]}}'
		'{"cmd":"tenant.del"}'
		'{"cmd":"tenant.del","name":["web"]}'
		'{"cmd":"apply","tenants":"all"}'
		'{"cmd":"apply","tenants":[{"name":"web"}]}'
		'{"cmd":"detach","iface":"nosuch0"}'
		'{"cmd":"detach","iface":7}'
		"$(printf '%.0s[' {1..5000})"
	)
	n=${#bad[@]}
	replies=$(printf '%s\n' "${bad[@]}" | ctl_send) || true
	echo "replies: $replies"
	expect_eq "error replies to $n bad lines" "$(jq -s 'map(select(.ok == false)) | length' <<<"$replies")" "$n"

	# still serving, policy untouched, while the half-line client is open
	kill -0 "$AGENT_PID" || { echo "rlagent died" >&2; return 1; }
	timeout 3 "$RLGATE_BUILD/rlctl" --socket "$CTL" status >/dev/null ||
		{ echo "rlctl status failed while a client holds half a line" >&2; return 1; }
	expect_eq "policy after the garbage" "$(tenants_json)" "$POLICY"

	# the half-line client, the one left open, is disconnected after
	# about 10 s
	conns=$(agent_conns)
	expect_eq "agent's open client connections at $((SECONDS - start)) s" "$conns" 1
	while ((conns > 0 && SECONDS - start <= 15)); do
		sleep 0.1
		conns=$(agent_conns)
	done
	expect_eq "agent's open client connections at $((SECONDS - start)) s" "$conns" 0
	expect_between "seconds until the half-line client was dropped" $((SECONDS - start)) 8 15
	kill "$half_pid" 2>/dev/null || true
	wait "$half_pid" 2>/dev/null || true

	kill -0 "$AGENT_PID" || { echo "rlagent died" >&2; return 1; }
	rl status >/dev/null
	expect_eq "policy at the end" "$(tenants_json)" "$POLICY"
	run_loadgen_json c1 --rate 100 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_near "still enforcing: connected" "$(json_get .total.connected)" "$(expected 50 1 10)" 10
}

@test "metrics: per-tenant admitted, denied, shadow_denied, tokens and agent info, equal to rlctl stats" {
	local page t f m type

	agent_start
	rl tenant set m1 --rate 10/s --burst 5 --match "$(prefixes c1)" --action rst
	rl tenant set m2 --rate 10/s --burst 5 --match "$(prefixes c2)" --shadow
	run_loadgen_json c1 --rate 50 --duration 1 "$(lab_target s1 "$PORT" 4)"
	run_loadgen_json c2 --rate 50 --duration 1 "$(lab_target s1 "$PORT" 6)"

	page=$(in_ns s1 curl -sfi --max-time 5 "http://$METRICS_ADDR/metrics" | tr -d '\r')
	echo "$page"
	grep -q '^HTTP/1\.[01] 200' <<<"$page" || { echo "not HTTP 200" >&2; return 1; }
	grep -qi '^content-type: text/plain' <<<"$page" || { echo "not text/plain" >&2; return 1; }

	for m in rlgate_admitted_total:counter rlgate_denied_total:counter \
		rlgate_shadow_denied_total:counter rlgate_tokens:gauge; do
		type=${m#*:} m=${m%%:*}
		grep -qx "# TYPE $m $type" <<<"$page" || { echo "no '# TYPE $m $type'" >&2; return 1; }
	done
	for t in m1 m2; do
		for f in admitted:rlgate_admitted_total denied:rlgate_denied_total \
			shadow_denied:rlgate_shadow_denied_total; do
			expect_eq "$t ${f#*:} (rlctl stats ${f%%:*})" \
				"$(metric_get "${f#*:}" "$t" "$page")" "$(stat_get "$t" "${f%%:*}")"
		done
		expect_between "$t rlgate_tokens" "$(metric_get rlgate_tokens "$t" "$page")" 0 5
	done
	# the numbers are the traffic's, not just present
	expect_between "m1 denied" "$(metric_get rlgate_denied_total m1 "$page")" 30 45
	expect_eq "m2 denied (shadow)" "$(metric_get rlgate_denied_total m2 "$page")" 0
	expect_between "m2 would-deny" "$(metric_get rlgate_shadow_denied_total m2 "$page")" 30 45
	grep -Eq '^rlgate_agent_info\{.*version="[^"]+".*interfaces="eth0".*\} 1$' <<<"$page" ||
		{ echo "no rlgate_agent_info with version and interfaces=\"eth0\"" >&2; return 1; }
}

@test "rules beyond --rule-memory are refused whole, naming the rule; earlier rules keep enforcing; another size on restart is refused" {
	local out rc=0 list page

	agent_start --rule-memory 2
	rl tenant set act --rate 1/h --burst 3 --match "$(prefixes c1)" --action rst
	POLICY=$(tenants_json)

	# 64 IPv6 /128s under distinct /48s: about 12 tables of 256 entries
	# each, more than the 256 a 2 MiB classifier has besides its roots
	list=$(for i in $(seq 1 64); do printf '2001:db8:%x::1/128,' "$i"; done)
	out=$(rl tenant set big --rate 10/s --match "${list%,}" 2>&1) || rc=$?
	echo "$out"
	expect_eq "rlctl exit status" "$rc" 2
	[[ $out == *"classifier is full at 2001:db8:"*"/128"*"they need --rule-memory "[3-9]*" or more (the agent has 2 MiB"* ]] ||
		{ echo "the error does not name the rule, the option and the size that fits" >&2; return 1; }
	expect_eq "policy after the refused set" "$(tenants_json)" "$POLICY"
	# the metrics say how full the classifier is: the fixed 512 tables and
	# the few the one tenant's rule takes, of 1,024
	page=$(metrics s1)
	expect_eq "rlgate_rule_tables_max" "$(metric_value rlgate_rule_tables_max "$page")" 1024
	expect_between "rlgate_rule_tables" "$(metric_value rlgate_rule_tables "$page")" 512 544

	# the tenant set before it still classifies and limits
	run_loadgen_json c1 --rate 20 --duration 0.5 --timeout 500 "$(lab_target s1 "$PORT" 4)"
	expect_eq "connected" "$(json_get .total.connected)" 3
	expect_eq "refused" "$(json_get .total.refused)" 7
	expect_eq "stats admitted" "$(stat_get act admitted)" 3

	# a restart asking for another size would not fit the pinned rules
	agent_stop TERM
	run agent_exec --iface eth0 --control "$CTL" --state-dir "$STATE_DIR" \
		--pin-dir "$PIN_DIR" --metrics "$METRICS_ADDR" --rule-memory 4
	echo "$output"
	expect_eq "restart exit status" "$status" 1
	[[ $output == *"$PIN_DIR/cls"*"2 MiB"*"4 MiB"*"--rule-memory 2"* ]] ||
		{ echo "message does not name both sizes and the way out" >&2; return 1; }
	xdp_attached || { echo "the running program was detached" >&2; return 1; }
	# the same size adopts them
	agent_start --rule-memory 2
	expect_eq "policy after restart" "$(tenants_json)" "$POLICY"
}

@test "rlctl --version and rlctl version print rlctl's version and the running agent's, exit 0" {
	local out

	agent_start
	out=$(rl --version)
	[[ $out == *"rlctl 0."* && $out == *"rlagent 0."* ]] ||
		{ echo "rlctl --version printed: $out" >&2; return 1; }
	expect_eq "rlctl --json --version, rlagent" "$(rl --json --version | jq -r .rlagent)" \
		"$(rl --json version | jq -r .rlagent)"
}

@test "rlctl tenant list --name GLOB --limit N: only the matching tenants, at most N, in text and --json; a bad --limit exits 2" {
	agent_start
	rl tenant set web-1 --rate 5/s --match 198.51.100.1/32
	rl tenant set web-2 --rate 5/s --match 198.51.100.2/32
	rl tenant set api --rate 5/s --match 198.51.100.3/32
	expect_eq "--json --name 'web-*'" \
		"$(rl --json tenant list --name 'web-*' | jq -c '[.[].name] | sort')" '["web-1","web-2"]'
	expect_eq "--json --name 'web-*' --limit 1" \
		"$(rl --json tenant list --name 'web-*' --limit 1 | jq length)" 1
	expect_eq "text --name api" "$(rl tenant list --name api | awk 'NR > 1 { print $1 }')" api
	expect_eq "text --name 'x*'" "$(rl tenant list --name 'x*')" "no tenants"
	expect_eq "--json --limit 2" "$(rl --json tenant list --limit 2 | jq length)" 2
	# the agent itself filters: a raw request gets only what matches
	expect_eq "raw tenant.list with match and limit" \
		"$(echo '{"cmd":"tenant.list","match":"web-*","limit":1}' | ctl_send |
			jq -c '[.tenants[].name | startswith("web-")] | [length, all]')" '[1,true]'
	expect_eq "raw stats with match" \
		"$(echo '{"cmd":"stats","match":"api"}' | ctl_send | jq -c '[.stats[].tenant]')" '["api"]'
	expect_eq "raw tenant.list with a bad limit" \
		"$(echo '{"cmd":"tenant.list","limit":-1}' | ctl_send | jq -r .code)" invalid
	run "$RLGATE_BUILD/rlctl" --socket "$CTL" tenant list --limit 0
	expect_eq "exit status of --limit 0" "$status" 2
	[[ $output == *"invalid --limit '0'"* ]] || { echo "$output" >&2; return 1; }
}

# tenants_out_of_order: tenants t-a t-b t-c t-d t-k t-q, created out of
# order; deleting the first-created ones reshuffles the agent's own array
# (the last tenant moves into a deleted place).
tenants_out_of_order() {
	local i n=16

	for i in m d x b q a k; do
		rl tenant set "t-$i" --rate 5/s --match "198.51.100.$((n++))/32"
	done
	rl tenant del t-m
	rl tenant del t-x
	rl tenant set t-c --rate 5/s --match 198.51.100.100/32
}

@test "rlctl tenant list: by name in text and --json, with --name and --limit, whatever the order of creations, deletions and an apply" {
	agent_start
	tenants_out_of_order
	expect_eq "--json" "$(rl --json tenant list | jq -c '[.[].name]')" \
		'["t-a","t-b","t-c","t-d","t-k","t-q"]'
	expect_eq "text" "$(rl tenant list | awk 'NR > 1 { print $1 }' | paste -sd,)" \
		t-a,t-b,t-c,t-d,t-k,t-q
	expect_eq "--json --limit 3" "$(rl --json tenant list --limit 3 | jq -c '[.[].name]')" \
		'["t-a","t-b","t-c"]'
	expect_eq "text --limit 2" "$(rl tenant list --limit 2 | awk 'NR > 1 { print $1 }' | paste -sd,)" \
		t-a,t-b
	expect_eq "--json --name 't-[c-z]' --limit 2" \
		"$(rl --json tenant list --name 't-[c-z]' --limit 2 | jq -c '[.[].name]')" '["t-c","t-d"]'
	expect_eq "raw tenant.list with limit" \
		"$(echo '{"cmd":"tenant.list","limit":2}' | ctl_send | jq -c '[.tenants[].name]')" \
		'["t-a","t-b"]'
	# an apply of the same tenants in another order lists the same
	rl --json tenant list | jq '{tenants: reverse}' >"$BATS_TEST_TMPDIR/policy.json"
	rl apply "$BATS_TEST_TMPDIR/policy.json"
	rl tenant del t-a
	expect_eq "--json after a reversed apply and a deletion" "$(rl --json tenant list | jq -c '[.[].name]')" \
		'["t-b","t-c","t-d","t-k","t-q"]'
}

@test "rlctl tenant list --after NAME --limit N pages through 40 tenants by name: each once, in order, across a deletion between pages; a bad --after exits 2" {
	local i page names="" last="" want

	agent_start
	# created in an order that is not the names' order
	jq -n '{tenants: [range(40) | (. * 17 % 40) as $k |
		{name: "p-\($k | tostring | if length < 2 then "0" + . else . end)",
		 rate: "5/s", match: ["10.9.\($k).0/24"]}]}' >"$BATS_TEST_TMPDIR/policy.json"
	rl apply "$BATS_TEST_TMPDIR/policy.json"
	for ((i = 0; i < 20; i++)); do
		page=$(rl --json tenant list --limit 7 ${last:+--after "$last"} | jq -r '.[].name')
		[[ -n $page ]] || break
		names+="$page"$'\n'
		last=$(tail -n1 <<<"$page")
		# between pages: one listed already goes, one not listed yet
		# goes (and is never listed), and the array reshuffles
		if ((i == 1)); then
			rl tenant del p-03
			rl tenant del p-30
		fi
	done
	want=$(seq -f 'p-%02g' 0 39 | grep -vx p-30)
	expect_eq "every tenant once, by name, over $i pages" "$(sed '/^$/d' <<<"$names")" "$want"
	expect_eq "pages of 7 for 39 names" "$i" 6
	expect_eq "text --after p-36" "$(rl tenant list --after p-36 | awk 'NR > 1 { print $1 }' | paste -sd,)" \
		p-37,p-38,p-39
	expect_eq "--after the last name" "$(rl tenant list --after p-39)" "no tenants"
	expect_eq "--after a name no tenant has, with --name" \
		"$(rl --json tenant list --after p-1 --name 'p-1*' --limit 2 | jq -c '[.[].name]')" '["p-10","p-11"]'
	expect_eq "raw tenant.list with after and limit" \
		"$(echo '{"cmd":"tenant.list","after":"p-20","limit":2}' | ctl_send | jq -c '[.tenants[].name]')" \
		'["p-21","p-22"]'
	run "$RLGATE_BUILD/rlctl" --socket "$CTL" tenant list --after 'p 1'
	expect_eq "exit status of --after 'p 1'" "$status" 2
	[[ $output == *"Error: invalid tenant name 'p 1'"* ]] || { echo "$output" >&2; return 1; }
	expect_eq "raw tenant.list with a bad after" \
		"$(echo '{"cmd":"tenant.list","after":"p 1"}' | ctl_send | jq -r '[.code, (.error | contains("p 1"))] | @tsv')" \
		$'invalid\ttrue'
	expect_eq "raw tenant.list with an after not a string" \
		"$(echo '{"cmd":"tenant.list","after":5}' | ctl_send | jq -r .code)" invalid
}

@test "rlctl stats: by name whatever the creations and deletions, --after NAME --limit N a page of it; --top with --limit exits 2" {
	local out rc=0

	agent_start
	tenants_out_of_order
	expect_eq "--json" "$(rl --json stats | jq -c '[.[].tenant]')" \
		'["t-a","t-b","t-c","t-d","t-k","t-q"]'
	expect_eq "text" "$(rl stats | awk 'NR > 1 && /^t-/ { print $1 }' | paste -sd,)" \
		t-a,t-b,t-c,t-d,t-k,t-q
	expect_eq "--json --after t-b --limit 3" \
		"$(rl --json stats --after t-b --limit 3 | jq -c '[.[].tenant]')" '["t-c","t-d","t-k"]'
	expect_eq "--json --name 't-[a-c]' --after t-a" \
		"$(rl --json stats --name 't-[a-c]' --after t-a | jq -c '[.[].tenant]')" '["t-b","t-c"]'
	expect_eq "raw stats with after and limit" \
		"$(echo '{"cmd":"stats","after":"t-k","limit":5}' | ctl_send | jq -c '[.stats[].tenant]')" \
		'["t-q"]'
	expect_eq "raw stats with top and limit" \
		"$(echo '{"cmd":"stats","top":1,"limit":1}' | ctl_send | jq -r .code)" invalid
	out=$(rl stats --top 1 --limit 2 2>&1) || rc=$?
	expect_eq "exit status of --top 1 --limit 2" "$rc" 2
	[[ $out == *"--top and --limit"* ]] || { echo "$out" >&2; return 1; }
}

@test "rlctl stats --name GLOB --top N: the matching tenants, the busiest first (not by name), at most N" {
	agent_start
	rl tenant set zz-busy --rate 100/s --burst 100 --match "$(prefixes c1)"
	rl tenant set idle-1 --rate 5/s --match 198.51.100.1/32
	rl tenant set idle-2 --rate 5/s --match 198.51.100.2/32
	run_loadgen_json c1 --rate 50 --duration 3 "$(lab_target s1 "$PORT" 4)"
	expect_eq "--json --name 'idle-*'" \
		"$(rl --json stats --name 'idle-*' | jq -c '[.[].tenant] | sort')" '["idle-1","idle-2"]'
	expect_eq "--json --top 1" "$(rl --json stats --top 1 | jq -c '[.[].tenant]')" '["zz-busy"]'
	expect_eq "text --top 2, first row" "$(rl stats --top 2 | awk 'NR == 2 { print $1 }')" zz-busy
	# the header, two tenants and the line saying the rates' window
	expect_eq "text --top 2, rows" "$(rl stats --top 2 | grep -vc '^LIMIT is ')" 3
	expect_eq "--name 'x*'" "$(rl stats --name 'x*')" "no tenants"
	# the agent itself picks the busiest: a raw request gets only them
	expect_eq "raw stats with top 1" \
		"$(echo '{"cmd":"stats","top":1}' | ctl_send | jq -c '[.stats[].tenant]')" '["zz-busy"]'
	expect_eq "raw stats with match and top" \
		"$(echo '{"cmd":"stats","match":"idle-*","top":5}' | ctl_send | jq -c '[.stats[].tenant]')" \
		'["idle-1","idle-2"]'
}

# metric_tenants NAME PAGE: the tenants with a NAME series on PAGE, sorted,
# space separated.
metric_tenants() {
	sed -n "s/^$1{tenant=\"\\([^\"]*\\)\"}.*/\\1/p" <<<"$2" | sort | tr '\n' ' '
}

@test "--metrics-tenants 2 of 4: series of exactly the 2 busiest since the last scrape (ties by name), host totals the sum over all 4; 0: totals only" {
	local page t m sum_a=0 sum_d=0

	agent_start --metrics-tenants 2
	rl tenant set busy --rate 10/s --burst 5 --match "$(prefixes c1)" --action rst
	rl tenant set c-idle --rate 5/s --match 198.51.100.1/32
	rl tenant set b-idle --rate 5/s --match 198.51.100.2/32
	rl tenant set a-idle --rate 5/s --match 198.51.100.3/32
	run_loadgen_json c1 --rate 50 --duration 1 "$(lab_target s1 "$PORT" 4)"

	page=$(metrics s1)
	for m in rlgate_admitted_total rlgate_denied_total rlgate_tokens rlgate_limit_rate; do
		expect_eq "$m series" "$(metric_tenants "$m" "$page")" "a-idle busy "
	done
	expect_eq "rlgate_metrics_tenants" "$(metric_value rlgate_metrics_tenants "$page")" 2
	expect_eq "rlgate_tenants" "$(metric_value rlgate_tenants "$page")" 4
	for t in busy a-idle b-idle c-idle; do
		sum_a=$((sum_a + $(stat_get "$t" admitted)))
		sum_d=$((sum_d + $(stat_get "$t" denied)))
	done
	expect_between "busy denied" "$(metric_get rlgate_denied_total busy "$page")" 30 45
	expect_eq "rlgate_host_admitted_total" "$(metric_value rlgate_host_admitted_total "$page")" "$sum_a"
	expect_eq "rlgate_host_denied_total" "$(metric_value rlgate_host_denied_total "$page")" "$sum_d"

	# no traffic since: every tenant did nothing in the last sample, so
	# the first two names; the totals stay
	page=$(metrics s1)
	expect_eq "series of an idle scrape" "$(metric_tenants rlgate_admitted_total "$page")" "a-idle b-idle "
	expect_eq "rlgate_host_denied_total, idle" "$(metric_value rlgate_host_denied_total "$page")" "$sum_d"

	agent_stop TERM
	agent_start --metrics-tenants 0
	page=$(metrics s1)
	expect_eq "series with 0" "$(grep -c 'tenant="' <<<"$page")" 0
	expect_eq "rlgate_host_denied_total with 0" "$(metric_value rlgate_host_denied_total "$page")" "$sum_d"
}

@test "rlctl status: kernel map bytes are the pinned maps' keys and values (per-CPU ones per CPU), agent RSS its resident set and its own memory the anonymous part of it, in all and per tenant (in --json; in text from 1,000 tenants on)" {
	local st want rss anon text

	agent_start --max-tenants 1000
	rl tenant set m1 --rate 10/s --match 198.51.100.1/32
	rl tenant set m2 --rate 10/s --match 198.51.100.2/32
	st=$(rl --json status)
	echo "$st"
	# the same sum from bpftool's view of every pinned map, and of the
	# program's own flow cache tags and ends of flows (.bss; not pinned)
	want=$({
		for f in "$PIN_DIR"/*; do bpftool -j map show pinned "$f" 2>/dev/null || true; done
		for id in $(bpftool -j prog show pinned "$PIN_DIR/xdp_rlgate" | jq '.map_ids[]'); do
			bpftool -j map show id "$id" |
				jq 'select(.name == "flow_tags_cpu" or (.name | endswith(".bss")))'
		done
	} |
		jq -s --argjson cpus "$(($(cut -d- -f2 /sys/devices/system/cpu/possible) + 1))" 'map(select(.bytes_key != null) |
			if .type == "ringbuf" then .max_entries
			elif (.type | test("percpu")) then
				(.bytes_key + ((.bytes_value + 7) / 8 | floor) * 8 * $cpus) * .max_entries
			else (.bytes_key + .bytes_value) * .max_entries end) | add')
	expect_eq "kernel_map_bytes" "$(jq .memory.kernel_map_bytes <<<"$st")" "$want"
	expect_eq "kernel_bytes_per_tenant" "$(jq .memory.kernel_bytes_per_tenant <<<"$st")" $((want / 2))
	# the tenants map alone: 1,000 slots of 128 bytes
	expect_between "kernel_map_bytes" "$want" 128000 2000000000
	rss=$(awk '$1 == "VmRSS:" { print $2 * 1024 }' "/proc/$AGENT_PID/status")
	expect_near "agent_rss_bytes" "$(jq .memory.agent_rss_bytes <<<"$st")" "$rss" 20
	expect_near "agent_bytes_per_tenant" "$(jq .memory.agent_bytes_per_tenant <<<"$st")" $((rss / 2)) 20
	# its own: without the kernel's maps it maps (and its files)
	anon=$(awk '$1 == "RssAnon:" { print $2 * 1024 }' "/proc/$AGENT_PID/status")
	expect_near "agent_anon_bytes" "$(jq .memory.agent_anon_bytes <<<"$st")" "$anon" 20
	expect_near "agent_anon_bytes_per_tenant" "$(jq .memory.agent_anon_bytes_per_tenant <<<"$st")" $((anon / 2)) 20
	expect_between "agent_anon_bytes within agent_rss_bytes" \
		"$(jq .memory.agent_anon_bytes <<<"$st")" 1 "$(jq .memory.agent_rss_bytes <<<"$st")"
	text=$(rl status)
	echo "$text"
	# per tenant only from 1,000 tenants on: with 2 the fixed maps are all
	grep -Eq "^memory: +kernel maps [0-9.]+ MiB, agent [0-9.]+ MiB resident, [0-9.]+ MiB of it its own$" <<<"$text" ||
		{ echo "no memory line in rlctl status" >&2; return 1; }
}

@test "an apply request in rlctl's compact form gets the same answer as the same request in another layout: bad tenants, conflicts, escapes, duplicate keys, trailing bytes; a good one applies" {
	local t1 t2 esc dup req spaced a b k

	agent_start
	t1='{"action":"drop","burst":5,"fail":"static","match":["192.0.2.64/28"],"name":"a1","ports":[80],"rate":"5/s","shadow":false}'
	t2='{"action":"drop","burst":5,"fail":"static","match":["192.0.2.64/28"],"name":"a2","ports":[80,443],"rate":"5/s","shadow":false}'
	esc='{"burst":5,"match":["192.0.2.80/28"],"name":"a\u0033","rate":"5/s"}'
	dup='{"burst":5,"match":["192.0.2.96/28"],"name":"a4","name":"a5","rate":"5/s"}'
	local sets=(
		"$t1,${t1/5\/s/-5\/s}"
		"$t1,$t2"
		"$t1,${t2/\"a2\"/\"a1\"}"
		"$t1,$dup"
		"${t1/192.0.2.64\/28/192.0.2.65\/28}"
		"$t1,{\"name\":\"x\"}"
		"$t1,$esc"
	)
	for k in "${!sets[@]}"; do
		req="{\"cmd\":\"apply\",\"tenants\":[${sets[k]}]}"
		spaced="{ \"cmd\": \"apply\", \"tenants\": [${sets[k]}] }"
		rl tenant del a1 >/dev/null 2>&1 || true
		rl tenant del a3 >/dev/null 2>&1 || true
		a=$(printf '%s\n' "$req" | ctl_send | jq -c 'del(.added)')
		rl tenant del a1 >/dev/null 2>&1 || true
		rl tenant del a3 >/dev/null 2>&1 || true
		b=$(printf '%s\n' "$spaced" | ctl_send | jq -c 'del(.added)')
		echo "set $k: $a / $b"
		[[ -n $a ]] || { echo "set $k: no reply" >&2; return 1; }
		expect_eq "set $k: the compact form's reply" "$a" "$b"
	done
	# the last set is valid (a3 written with an escape) and applied
	expect_eq "tenants after the last set" "$(rl --json tenant list | jq -c '[.[].name] | sort')" '["a1","a3"]'
	# bytes after the closing brace make it no request at all
	a=$(printf '%s\n' "{\"cmd\":\"apply\",\"tenants\":[$t1]}x" | ctl_send | jq -c .code)
	expect_eq "reply to trailing bytes" "$a" '"invalid"'
}

@test "rlctl apply counts what it changed: the same set again adds, updates and removes nothing (a default written out included); one tenant changed, one new and one gone count 1, 1 and 1" {
	local f=$BATS_TEST_TMPDIR/set.json

	# applied: [added, updated, removed] of rlctl apply FILE's answer
	applied() { rl --json apply "$f" | jq -c '[.added, .updated, .removed]'; }
	agent_start
	jq -n '{tenants: [range(3) as $i | {name: "s\($i)", rate: "10/s", burst: 10,
		match: ["198.51.100.\($i * 16)/28"], ports: [80, 443]}]}' >"$f"
	expect_eq "the first apply" "$(applied)" '[3,0,0]'
	expect_eq "the same set again" "$(applied)" '[0,0,0]'
	# s1 with its defaults written out (one bucket, no cap, fail static)
	jq '.tenants[1] += {shards: 1, max_conns: 0, fail: "static"}' "$f" >"$f.new"
	mv "$f.new" "$f"
	expect_eq "defaults written out" "$(applied)" '[0,0,0]'
	# s0's ports in another order, s2 gone, s3 new
	jq '.tenants[0].ports = [443, 80] | .tenants[2] = {name: "s3", rate: "10/s",
		burst: 10, match: ["198.51.100.64/28"]}' "$f" >"$f.new"
	mv "$f.new" "$f"
	expect_eq "one changed, one new, one gone" "$(applied)" '[1,1,1]'
	expect_eq "the tenants" "$(rl --json tenant list | jq -c '[.[].name] | sort')" '["s0","s1","s3"]'
}

@test "an agent keeps the newest 4,096 tombstones: 4,000 tenants and then 100 more deleted leave all 100 and 3,996 of the 4,000, the oldest forgotten before their TTL" {
	local f=$BATS_TEST_TMPDIR/set.json tombs

	# set N PREFIX: a set of N tenants PREFIX0... (IPv6 /64s of 2001:db8)
	set_of() {
		jq -n --argjson n "$1" --arg p "$2" '{tenants: [range($n) as $i |
			{name: "\($p)\($i)", rate: "10/s", match: ["2001:db8:\($p | explode[0]):\($i)::/64"]}]}'
	}
	agent_start
	set_of 4000 a >"$f"
	rl apply "$f" >/dev/null
	echo '{"tenants": []}' >"$BATS_TEST_TMPDIR/none.json"
	rl apply "$BATS_TEST_TMPDIR/none.json" >/dev/null
	set_of 100 b >"$f"
	rl apply "$f" >/dev/null
	rl apply "$BATS_TEST_TMPDIR/none.json" >/dev/null
	# a restart folds the journal into policy.json
	agent_stop TERM
	agent_start
	tombs=$(jq -c '[.deleted[].name]' "$STATE_DIR/policy.json")
	expect_eq "tombstones in policy.json" "$(jq length <<<"$tombs")" 4096
	expect_eq "b- tombstones (the newest)" "$(jq '[.[] | select(startswith("b"))] | length' <<<"$tombs")" 100
	expect_eq "a- tombstones" "$(jq '[.[] | select(startswith("a"))] | length' <<<"$tombs")" 3996
	expect_eq "tenants listed" "$(rl --json tenant list | jq length)" 0
}

@test "control socket: a user of the control group other than root holds at most 16 of the 64 connections, and connections held idle keep rlctl out for a second at most" {
	local out=$BATS_TEST_TMPDIR/held nobody_pid root_pid

	# a socket nobody (in nogroup) may reach, where a test's tmp dir is not
	RUN_DIR=/run/rlgate-test-$LAB
	CTL=$RUN_DIR/ctl.sock
	agent_start --control-group nogroup
	setpriv --reuid nobody --regid nogroup --clear-groups /usr/bin/python3 -c "$HOLD_PY" \
		unix "$CTL" 20 60 >"$out.nobody" 2>"$out.nobody.err" &
	nobody_pid=$!
	expect_eq "connections nobody holds of 20" "$(held_by "$out.nobody")" 16
	# root fills the other 48 places
	python3 -c "$HOLD_PY" unix "$CTL" 48 60 >"$out.root" 2>"$out.root.err" &
	root_pid=$!
	expect_eq "connections root holds of 48" "$(held_by "$out.root")" 48
	expect_eq "the agent's control connections" "$(agent_conns)" 64
	# every place taken by a connection idle for a second: rlctl gets one
	rl status >/dev/null
	kill "$nobody_pid" "$root_pid"
	wait "$nobody_pid" "$root_pid" 2>/dev/null || true
}

@test "metrics: 32 connections held open without a request keep a scrape out for a second at most" {
	local out=$BATS_TEST_TMPDIR/held pid n

	agent_start
	in_ns s1 python3 -c "$HOLD_PY" tcp "$METRICS_ADDR" 32 60 >"$out" 2>"$out.err" &
	pid=$!
	expect_eq "connections held of 32" "$(held_by "$out")" 32
	# every one accepted by the agent (not left in the backlog), then a
	# second more: each has been held that long at least
	for ((n = 0; n < 200; n++)); do
		(($(metrics_conns) == 32)) && break
		sleep 0.05
	done
	expect_eq "the agent's metrics connections" "$(metrics_conns)" 32
	sleep 1.1
	metrics s1 | grep -q '^rlgate_agent_info' ||
		{ echo "no scrape while 32 connections are held" >&2; kill "$pid"; return 1; }
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

@test "a tenant name that differs by case or one typo: tenant get, del, stats and set without --match exit 2 naming the tenant meant; a name as near to two is not guessed" {
	local out

	agent_start
	rl tenant set web --rate 10/s --match 198.51.100.0/28
	rl tenant set api-eu --rate 10/s --match 198.51.100.16/28
	rl tenant set api-us --rate 10/s --match 198.51.100.32/28
	POLICY=$(tenants_json)

	expect_usage_error tenant get Web
	out=$(rl tenant get Web 2>&1) || true
	expect_eq "tenant get Web" "$out" "Error: no tenant named 'Web'; did you mean 'web'?"
	expect_usage_error tenant del WEB
	out=$(rl tenant del WEB 2>&1) || true
	[[ $out == *"did you mean 'web'?"* ]] || fail "tenant del WEB: $out"
	expect_usage_error stats wbe
	out=$(rl stats wbe 2>&1) || true
	[[ $out == *"did you mean 'web'?"* ]] || fail "stats wbe: $out"
	out=$(rl --json tenant get API-EU) || true
	expect_eq "--json tenant get API-EU" "$(jq -r .error <<<"$out")" \
		"no tenant named 'API-EU'; did you mean 'api-eu'?"
	# an update meant for web, without what a new tenant needs
	expect_usage_error tenant set Web --rate 20/s
	out=$(rl tenant set Web --rate 20/s 2>&1) || true
	[[ $out == *"did you mean 'web'?"* && $out == *"needs --match"* ]] ||
		fail "tenant set Web --rate 20/s: $out"
	# api-uu is one edit from both: no guess; nosuch is near nothing
	out=$(rl tenant get api-uu 2>&1) || true
	expect_eq "tenant get api-uu" "$out" "Error: no tenant named 'api-uu'"
	out=$(rl tenant get nosuch 2>&1) || true
	expect_eq "tenant get nosuch" "$out" "Error: no tenant named 'nosuch'"
	expect_eq "policy" "$(tenants_json)" "$POLICY"
}

@test "a prefix wider than another tenant's, overlapping it: tenant set, apply and apply --dry-run warn naming both tenants and prefixes, the agent logs it, and the change is made (exit 0)" {
	local out err file=$BATS_TEST_TMPDIR/policy.json

	agent_start
	rl tenant set web --rate 10/s --match 198.51.100.16/28 --port 80
	# the wider one after the narrower: the wider one is the one that loses
	rl tenant set all --rate 10/s --match 198.51.100.0/24 2>"$BATS_TEST_TMPDIR/err" >/dev/null
	err=$(cat "$BATS_TEST_TMPDIR/err")
	expect_eq "tenant set all warns" "$err" "Warning: overlap: tenant 'all' claims 198.51.100.0/24, but connections from 198.51.100.16/28 on port 80 go to tenant 'web' (the longest prefix wins)"
	expect_eq "all is set" "$(rl --json tenant get all | jq -r '.match[0]')" "198.51.100.0/24"
	grep -qF "overlap: tenant 'all' claims 198.51.100.0/24" "$AGENT_LOG" ||
		fail "the agent did not log the overlap: $(tail -n 5 "$AGENT_LOG")"
	# a change of another tenant, far from both, says nothing
	rl tenant set far --rate 10/s --match 203.0.113.0/24 2>"$BATS_TEST_TMPDIR/err" >/dev/null
	expect_eq "tenant set far" "$(cat "$BATS_TEST_TMPDIR/err")" ""
	# port lists that do not meet lose nothing
	rl tenant set web --port 80 --match 203.0.113.64/26 2>"$BATS_TEST_TMPDIR/err" >/dev/null
	expect_eq "web inside far" "$(cat "$BATS_TEST_TMPDIR/err")" "Warning: overlap: tenant 'far' claims 203.0.113.0/24, but connections from 203.0.113.64/26 on port 80 go to tenant 'web' (the longest prefix wins)"
	rl tenant set far --port 443 2>"$BATS_TEST_TMPDIR/err" >/dev/null
	expect_eq "far on 443 only" "$(cat "$BATS_TEST_TMPDIR/err")" ""

	cat >"$file" <<EOF
{"tenants": [{"name": "web", "rate": "10/s", "match": ["198.51.100.16/28"]},
             {"name": "all", "rate": "10/s", "match": ["198.51.100.0/24", "2001:db8::/32"]},
             {"name": "v6", "rate": "10/s", "match": ["2001:db8:5::/48"]}]}
EOF
	out=$(rl apply --dry-run "$file" 2>"$BATS_TEST_TMPDIR/err")
	expect_eq "dry run" "$out" "$file: 3 tenants, valid"
	expect_eq "dry run warnings" "$(grep -c "^Warning: overlap: tenant 'all' claims" "$BATS_TEST_TMPDIR/err")" 2
	out=$(rl --json apply --dry-run "$file" 2>/dev/null)
	expect_eq "dry run --json warnings" "$(jq '.warnings | length' <<<"$out")" 2
	out=$(rl apply "$file" 2>"$BATS_TEST_TMPDIR/err")
	[[ $out == "applied '$file':"* ]] || fail "apply: $out"
	grep -qF "Warning: overlap: tenant 'all' claims 2001:db8::/32, but connections from 2001:db8:5::/48 go to tenant 'v6'" "$BATS_TEST_TMPDIR/err" ||
		fail "apply's warnings: $(cat "$BATS_TEST_TMPDIR/err")"
	expect_eq "apply's warnings" "$(grep -c '^Warning: overlap' "$BATS_TEST_TMPDIR/err")" 2
	expect_eq "tenants applied" "$(rl --json tenant list | jq -c '[.[].name]')" '["all","v6","web"]'
}
