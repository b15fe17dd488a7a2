#!/usr/bin/env bash
# demo.sh: rlgate in about fifteen seconds.  A lab with one server and one
# client, an unmodified accept-and-close server, rlagent on the server's
# interface, one tenant limit set with rlctl, three times the limit offered
# for ten seconds, a report, and everything removed again.
#   tools/demo.sh [BUILD_DIR]        (run by `make demo`; needs root)
set -euo pipefail

readonly RATE=100 BURST=20 OFFER=300 DURATION=10 PORT=8080 TOLERANCE_PCT=5

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
[[ $build == /* ]] || build=$PWD/$build
export RLGATE_BUILD=$build

lab=demo$$
tmp=
pin_dir=/sys/fs/bpf/rlgate-$lab
agent_pid=
serve_pid=
lab_made=0

step() { printf '==> %s\n' "$*"; }
die() {
	echo "demo: error: $*" >&2
	exit 1
}

rl() { "$build/rlctl" --socket "$tmp/rlagent.sock" "$@"; }

cleanup() {
	local rc=$?

	trap - EXIT INT TERM
	set +e
	if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
		step "detaching rlgate from the server's eth0 (rlctl detach; the agent exits and removes its pins)"
		rl detach eth0 >/dev/null 2>&1
		for _ in {1..50}; do
			kill -0 "$agent_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$agent_pid" 2>/dev/null; then
			step "stopping rlagent (pid $agent_pid)"
			kill -TERM "$agent_pid" 2>/dev/null
			sleep 0.5
			kill -KILL "$agent_pid" 2>/dev/null
		fi
		wait "$agent_pid" 2>/dev/null
	fi
	if [[ -n $serve_pid ]] && kill -0 "$serve_pid" 2>/dev/null; then
		kill -TERM "$serve_pid" 2>/dev/null
		wait "$serve_pid" 2>/dev/null
	fi
	if ((lab_made)); then
		step "removing the lab ($lab)"
		"$repo/tools/lab.sh" down "$lab" >/dev/null
	fi
	[[ -e $pin_dir ]] && rm -rf "$pin_dir"
	[[ -n $tmp ]] && rm -rf "$tmp"
	if ((rc == 0)); then
		echo "demo: done, nothing left behind"
	else
		echo "demo: failed (exit $rc)" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- preconditions -------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, XDP); try: sudo make demo"
for f in rlagent rlctl loadgen pass.bpf.o; do
	[[ -e $build/$f ]] || die "missing $build/$f: run 'make' first"
done
for c in ip nsenter jq sysctl; do
	command -v "$c" >/dev/null || die "missing command '$c': run 'tools/deps.sh demo' (or 'make demo')"
done
mountpoint -q /sys/fs/bpf || die "bpffs is not mounted on /sys/fs/bpf: run 'tools/deps.sh demo' (or 'make demo')"
tmp=$(mktemp -d /tmp/rlgate-demo.XXXXXX)

# --- the lab ---------------------------------------------------------------------
step "building a lab of network namespaces: server $lab-s1, client $lab-c1, a bridge"
lab_made=1
"$repo/tools/lab.sh" up "$lab" --servers 1 --clients 1 >"$tmp/lab.log" 2>&1 ||
	{ cat "$tmp/lab.log" >&2; die "couldn't build the lab"; }
server=192.0.2.11
client_net=192.0.2.64/28,2001:db8:1:0:1::/80

step "starting an unmodified TCP server on $server:$PORT (accepts and closes every connection)"
ip netns exec "$lab-s1" "$build/loadgen" --json --serve "$server:$PORT" \
	>"$tmp/serve.json" 2>"$tmp/serve.log" &
serve_pid=$!
for _ in {1..100}; do
	grep -q 'listening on' "$tmp/serve.log" && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; die "the server did not start"; }
	sleep 0.05
done
grep -q 'listening on' "$tmp/serve.log" || die "the server is not listening after 5 s"

# nsenter, not `ip netns exec`: the latter gives the process a /sys of its
# own without the bpffs, and the agent's pins must live on /sys/fs/bpf.
step "starting rlagent on the server's eth0 (pins in $pin_dir)"
nsenter --net="/run/netns/$lab-s1" "$build/rlagent" --iface eth0 \
	--control "$tmp/rlagent.sock" --state-dir "$tmp/state" --pin-dir "$pin_dir" \
	--metrics 127.0.0.1:9464 >"$tmp/rlagent.log" 2>&1 &
agent_pid=$!
for _ in {1..100}; do
	rl status >/dev/null 2>&1 && break
	kill -0 "$agent_pid" 2>/dev/null || { cat "$tmp/rlagent.log" >&2; die "rlagent exited"; }
	sleep 0.1
done
rl status >/dev/null 2>&1 || { cat "$tmp/rlagent.log" >&2; die "rlagent does not answer"; }
attach=$(rl --json status | jq -r '.interfaces[0].attach')

step "rlctl tenant set demo --rate $RATE/s --burst $BURST --match $client_net --port $PORT --action rst"
rl tenant set demo --rate "$RATE/s" --burst "$BURST" --match "$client_net" \
	--port "$PORT" --action rst >/dev/null

step "offering $OFFER connections/s for $DURATION s from the client ($((OFFER / RATE))x the limit)"
ip netns exec "$lab-c1" "$build/loadgen" --json --rate "$OFFER" --duration "$DURATION" \
	"$server:$PORT" >"$tmp/load.json" 2>"$tmp/load.log" ||
	{ cat "$tmp/load.log" >&2; die "loadgen failed"; }

kill -TERM "$serve_pid"
wait "$serve_pid" || true
serve_pid=
accepted=$(jq -r '.accepted // "?"' "$tmp/serve.json" 2>/dev/null || echo "?")

# --- the report ------------------------------------------------------------------
total() { jq -r ".total.$1" "$tmp/load.json"; }
attempts=$(total attempts)
connected=$(total connected)
refused=$(total refused)
timed_out=$(total timed_out)
errors=$(total errors)
expected=$((RATE * DURATION + BURST))
lo=$((expected * (100 - TOLERANCE_PCT) / 100))
hi=$((expected * (100 + TOLERANCE_PCT) / 100))

echo
echo "Result"
printf '  %-22s %s\n' \
	"configured limit:" "$RATE/s, burst $BURST, action rst (tenant 'demo': $client_net, port $PORT)" \
	"enforced by:" "XDP on the server's eth0 ($attach mode)" \
	"offered:" "$attempts connections in $DURATION s ($OFFER/s)" \
	"admitted:" "$connected (handshake completed at the client)" \
	"refused:" "$refused (answered with a TCP RST by rlgate)" \
	"timed out:" "$timed_out" \
	"expected admitted:" "$expected = $RATE/s x $DURATION s + burst $BURST" \
	"server accepted:" "$accepted (the server itself was not changed)"
((errors == 0)) || printf '  %-22s %s\n' "errors:" "$errors ($(jq -r '.targets[0].last_error // "?"' "$tmp/load.json"))"
echo
echo "The agent's own count (rlctl stats):"
rl stats demo | sed 's/^/  /'
echo

if ((connected >= lo && connected <= hi)); then
	echo "OK: admitted $connected of $attempts, within $TOLERANCE_PCT% of the expected $expected"
else
	echo "FAIL: admitted $connected of $attempts, expected $expected (between $lo and $hi)" >&2
	exit 1
fi
