#!/usr/bin/env bash
# Fleet-mode benchmark: three hosts, each with rlagent leasing from one Redis.
# First the lease calls per second one agent drives when every connection
# needs one (8 tenants with leases of one token, both clients offering
# FLEET_BENCH_DRIVE/s each, default 3000).  Then one client offering 1.5x a tenant's limit skewed 90/5/5 over the hosts:
# how close the fleet comes to the limit and how many Redis calls each
# admitted connection costs, with adaptive leases and with leases of one
# token (one call per connection).  Then two clients offering 85% and 95% of
# a bigger tenant's limit (FLEET_BENCH_RATE/s, default 3000, burst a tenth of
# a second), spread evenly and skewed 90/5/5: the part refused, which under
# the limit is false refusals.  Last, a cap of 50 connections in flight
# opened back to back from cold onto one host: the part held
# (fleet_conncap_burst_held_ratio, target at least 0.95).  Prints `name
# value unit` lines.  Exits 1 when
# the benchmark could not run; the figures themselves are results, not errors.
# With FLEET_BENCH_REDIS=cluster the agents lease from a Redis Cluster of
# three masters instead (--redis cluster:...), and only the first three
# scenarios run: their figures are named fleet_cluster_*.
#   tools/bench-fleet.sh [BUILD_DIR]      (root; FLEET_BENCH_SECONDS, default 10)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
secs=${FLEET_BENCH_SECONDS:-10}
big=${FLEET_BENCH_RATE:-3000}	# the false-refusal scenarios' limit, per second
drive_rate=${FLEET_BENCH_DRIVE:-3000}	# per client, in the one-agent scenario
rate=200		# the tenant's limit, per second
burst=20
offered=300		# per second, from one client
weights=(18 1 1)	# 90/5/5 over s1..s3
redis_ip=192.0.2.250
redis_port=6379
mode=${FLEET_BENCH_REDIS:-single}
cluster_ports=(7001 7002 7003)

# shellcheck source=tools/bench-lib.bash
. "$root/tools/bench-lib.bash"

[[ $(id -u) -eq 0 ]] || die "the fleet benchmark builds network namespaces and attaches XDP; run it as root"
for f in rlagent rlctl loadgen pass.bpf.o; do
	[[ -e $build/$f ]] || die "$build/$f not found; build it with 'make'"
done
for c in redis-server redis-cli jq nsenter; do
	command -v "$c" >/dev/null || die "$c not found; run tools/deps.sh"
done
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs < 2)); then
	die "FLEET_BENCH_SECONDS '$secs': expected a whole number of seconds, at least 2"
fi
[[ $mode == @(single|cluster) ]] ||
	die "FLEET_BENCH_REDIS '$mode': expected single or cluster"
if ! [[ $drive_rate =~ ^[0-9]+$ ]] || ((drive_rate < 100)); then
	die "FLEET_BENCH_DRIVE '$drive_rate': expected a whole number of connections per second, at least 100"
fi
if ! [[ $big =~ ^[0-9]+$ ]] || ((big < 100)); then
	die "FLEET_BENCH_RATE '$big': expected a whole number of connections per second, at least 100"
fi

export RLGATE_BUILD=$build
lab=bf$$
work=$(mktemp -d /tmp/rlgate-bench-fleet.XXXXXX) || die "couldn't make a work directory"
pids=()

trap fleet_cleanup EXIT
trap 'exit 1' INT TERM

rl() {
	local i=$1

	shift
	"$build/rlctl" --socket "$work/s$i/sock" "$@"
}

"$root/tools/lab.sh" up "$lab" --servers 3 --clients 2 --redis >"$work/lab.log" 2>&1 ||
	{ cat "$work/lab.log" >&2; die "couldn't build the lab"; }

if [[ $mode == cluster ]]; then
	addrs=()
	for p in "${cluster_ports[@]}"; do
		mkdir -p "$work/redis-$p"
		redis_up "$p" --cluster-enabled yes --cluster-config-file "$work/redis-$p/nodes.conf" \
			--cluster-require-full-coverage no --dir "$work/redis-$p"
		addrs+=("$redis_ip:$p")
	done
	ip netns exec "$lab-redis" redis-cli --cluster create "${addrs[@]}" --cluster-yes \
		>"$work/cluster.log" 2>&1 || { cat "$work/cluster.log" >&2; die "couldn't create the cluster"; }
	for p in "${cluster_ports[@]}"; do
		for ((n = 0; n < 100; n++)); do
			ip netns exec "$lab-redis" redis-cli -h "$redis_ip" -p "$p" CLUSTER INFO |
				grep -q '^cluster_state:ok' && break
			sleep 0.05
		done
	done
	redis_addr="cluster:$(IFS=,; echo "${addrs[*]}")"
else
	redis_up "$redis_port"
	redis_addr=$redis_ip:$redis_port
fi

for i in 1 2 3; do
	mkdir -p "$work/s$i"
	ip netns exec "$lab-s$i" "$build/loadgen" --serve "192.0.2.1$i:8080" \
		>/dev/null 2>"$work/s$i/serve.log" &
	pids+=($!)
	disown $!
done
fleet_agents_up "$redis_addr"

# scenario NAME [tenant options]: a fresh tenant NAME limited to rate/burst
# for client 1's prefix; after its first leases have idled back (a lease
# TTL), the skewed load; one lease TTL after it, the fleet's counters.
# Prints "admitted redis_calls leases overshoot_bound lease_size_s1"
# (leases: the calls that granted tokens).
scenario() {
	local name=$1 i n calls=0 leases=0 admitted out

	shift
	rl 1 tenant set "$name" --rate "$rate/s" --burst "$burst" --match 192.0.2.64/28 \
		--action rst "$@" >/dev/null || return 1
	for i in 2 3; do
		for ((n = 0; n < 40; n++)); do
			rl "$i" tenant get "$name" >/dev/null 2>&1 && break
			sleep 0.05
		done
		((n < 40)) || { echo "tenant '$name' did not reach s$i" >&2; return 1; }
	done
	sleep 2
	out=$(ip netns exec "$lab-c1" "$build/loadgen" --json --rate "$offered" --duration "$secs" \
		"192.0.2.11:8080@${weights[0]}" "192.0.2.12:8080@${weights[1]}" \
		"192.0.2.13:8080@${weights[2]}" 2>"$work/loadgen.err") ||
		{ cat "$work/loadgen.err" >&2; return 1; }
	admitted=$(jq -er .total.connected <<<"$out") || return 1
	sleep 1.5
	for i in 1 2 3; do
		out=$(rl "$i" --json stats "$name") || return 1
		n=$(jq -er '.[0].redis_calls' <<<"$out") || return 1
		calls=$((calls + n))
		n=$(jq -er '.[0].leases' <<<"$out") || return 1
		leases=$((leases + n))
	done
	echo "$admitted $calls $leases $(rl 1 --json stats "$name" | jq -r '.[0] | "\(.overshoot_bound) \(.lease_size)"')"
	rl 1 tenant del "$name" >/dev/null || return 1
	for i in 2 3; do
		for ((n = 0; n < 40; n++)); do
			rl "$i" tenant get "$name" >/dev/null 2>&1 || break
			sleep 0.05
		done
		((n < 40)) || { echo "tenant '$name' still on s$i after deletion" >&2; return 1; }
	done
}

# drive: the lease calls per second one agent makes when every connection
# needs one.  Eight tenants on host 1 (client 1 and client 2 x ports
# 8080-8083) with leases of one token (--overshoot 3: 3 agents x 1) and a
# limit far above the load; both clients offer $drive_rate/s each over the
# four ports for $secs s.  A tenant has one lease in flight at a time and
# a SYN that comes while it is on its way finds no token, so what is
# admitted is what the agent and Redis answered, not what was offered.
# Prints "redis_calls attempts admitted".
drive() {
	local c p i n calls=0 out1 out2 targets=()

	for p in 8081 8082 8083; do
		ip netns exec "$lab-s1" "$build/loadgen" --serve "192.0.2.11:$p" \
			>/dev/null 2>"$work/s1/serve-$p.log" &
		pids+=($!)
		disown $!
	done
	for p in 8080 8081 8082 8083; do
		targets+=("192.0.2.11:$p")
		for c in 1 2; do
			rl 1 tenant set "drive-c$c-$p" --rate 100000/s --burst 1000 --overshoot 3 \
				--match "192.0.2.$((48 + 16 * c))/28" --port "$p" --action rst \
				>/dev/null || return 1
		done
	done
	sleep 2
	for c in 1 2; do
		ip netns exec "$lab-c$c" "$build/loadgen" --json --rate "$drive_rate" \
			--duration "$secs" "${targets[@]}" >"$work/drive-c$c.json" 2>"$work/loadgen.err" &
		pids+=($!)
	done
	wait "${pids[-1]}" "${pids[-2]}" 2>/dev/null
	out1=$(cat "$work/drive-c1.json") && out2=$(cat "$work/drive-c2.json") || return 1
	sleep 1.2
	for p in 8080 8081 8082 8083; do
		for c in 1 2; do
			n=$(rl 1 --json stats "drive-c$c-$p" | jq -er '.[0].redis_calls') || return 1
			calls=$((calls + n))
			rl 1 tenant del "drive-c$c-$p" >/dev/null || return 1
		done
	done
	jq -nr --argjson a "$out1" --argjson b "$out2" --arg c "$calls" \
		'"\($c) \($a.total.attempts + $b.total.attempts) \($a.total.connected + $b.total.connected)"'
}

drive >"$work/drive" || die "the one-agent lease-call scenario did not run"
read -r dcalls dattempts dadm <"$work/drive"
[[ $mode == cluster ]] && dname=fleet_cluster || dname=fleet
echo "# one agent, 8 tenants with leases of 1 token, $((2 * drive_rate))/s offered for $secs s" \
	"($mode Redis): $dcalls lease calls, $dadm of $dattempts admitted"
awk -v c="$dcalls" -v o="$dattempts" -v a="$dadm" -v s="$secs" -v n="$dname" 'BEGIN {
	printf "%s_one_agent_lease_calls_per_s %.0f calls/s\n", n, c / s
	printf "%s_one_agent_admitted_ratio %.3f ratio\n", n, a / o
}'

scenario fleet-bench >"$work/adaptive" || die "the adaptive-lease scenario did not run"
read -r adm calls leases bound lease <"$work/adaptive"
# Lease size 1 without a special build: an overshoot budget of 3 tokens
# shared by 3 agents caps every lease at 1 token.
scenario fleet-bench-1 --overshoot 3 >"$work/lease1" || die "the lease-size-1 scenario did not run"
read -r adm1 calls1 leases1 bound1 lease1 <"$work/lease1"
[[ -n ${lease:-} && -n ${lease1:-} ]] || die "a scenario printed no figures"
((adm > 0 && adm1 > 0 && calls > 0)) || die "nothing admitted or no Redis calls: admitted $adm/$adm1, calls $calls"

if [[ $mode == cluster ]]; then
	limit=$((rate * secs + burst))
	echo "# fleet on a Redis Cluster of 3 masters: 3 hosts, limit $rate/s burst $burst," \
		"offered $offered/s for $secs s split ${weights[*]}; limit x T + burst = $limit"
	echo "# adaptive leases: admitted $adm, Redis calls $calls, overshoot bound $bound;" \
		"lease size 1: admitted $adm1, Redis calls $calls1"
	awk -v a="$adm" -v c="$calls" -v a1="$adm1" -v c1="$calls1" -v l="$limit" -v s="$secs" 'BEGIN {
		printf "fleet_cluster_accuracy %.3f ratio\n", a / l
		printf "fleet_cluster_redis_calls_per_admit %.3f calls\n", c / a
		printf "fleet_cluster_accuracy_lease1 %.3f ratio\n", a1 / l
		printf "fleet_cluster_lease_calls_per_s_lease1 %.0f calls/s\n", c1 / s
	}'
	exit 0
fi

# reached NAME: tenant NAME set on host 1 has reached hosts 2 and 3 (2 s
# at most each).
reached() {
	local i n

	for i in 2 3; do
		for ((n = 0; n < 40; n++)); do
			rl "$i" tenant get "$1" >/dev/null 2>&1 && break
			sleep 0.05
		done
	done
}

# under NAME PERCENT W1 W2 W3: a fresh tenant NAME of $big/s (burst a tenth
# of a second) for both clients' prefixes, settled; PERCENT of it offered
# for $secs s from both clients, weighted W1/W2/W3 over the hosts.  Prints
# "attempts refused redis_calls admitted offered_per_s" (refused: RST or
# timed out).
under() {
	local name=$1 pct=$2 i n out1 out2 calls=0 adm=0 per

	shift 2
	rl 1 tenant set "$name" --rate "$big/s" --burst $((big / 10)) \
		--match 192.0.2.64/28,192.0.2.80/28 --action rst >/dev/null || return 1
	reached "$name"
	sleep 1.5
	per=$(awk -v r="$big" -v p="$pct" 'BEGIN { printf "%.1f", r * p / 100 / 2 }')
	for c in 1 2; do
		ip netns exec "$lab-c$c" "$build/loadgen" --json --rate "$per" --duration "$secs" \
			"192.0.2.11:8080@$1" "192.0.2.12:8080@$2" "192.0.2.13:8080@$3" \
			>"$work/under-c$c.json" 2>"$work/loadgen.err" &
		pids+=($!)
	done
	wait "${pids[-1]}" "${pids[-2]}" 2>/dev/null
	out1=$(cat "$work/under-c1.json") && out2=$(cat "$work/under-c2.json") || return 1
	sleep 1.2
	for i in 1 2 3; do
		n=$(rl "$i" --json stats "$name" | jq -er '.[0] | "\(.redis_calls) \(.admitted)"') || return 1
		calls=$((calls + ${n% *}))
		adm=$((adm + ${n#* }))
	done
	jq -nr --argjson a "$out1" --argjson b "$out2" --arg c "$calls" --arg d "$adm" \
		'"\($a.total.attempts + $b.total.attempts) \($a.total.refused + $b.total.refused +
		  $a.total.timed_out + $b.total.timed_out) \($c) \($d) \(($a.total.attempts +
		  $b.total.attempts) / ([$a.elapsed_s, $b.elapsed_s] | max) | floor)"'
	rl 1 tenant del "$name" >/dev/null
}

for pct in 85 95; do
	: >"$work/under-$pct"
	for w in "1 1 1" "18 1 1"; do
		# shellcheck disable=SC2086 # the weights are three words
		under "under-$pct-${w// /-}" "$pct" $w >>"$work/under-$pct" ||
			die "the $pct% scenario ($w) did not run"
	done
done

# conn_burst NAME CAP: a fresh tenant NAME capped at CAP connections in
# flight (a RST past it, rate no object) for client 1's prefix.  Once no
# host holds a slot of it in Redis (an idle host gives its holding back)
# and s1 may admit the whole cap (its last call saw it free), client 1
# opens CAP connections to a server on s1 that keeps them, back to back -
# each as soon as the last one connected, 0.5 s at most each - and holds
# them.  Prints "held cap": those still open half a second later.
conn_burst() {
	local name=$1 cap=$2 n held slots port=8090

	ip netns exec "$lab-s1" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1024)
held = []
while True:
    held.append(s.accept()[0])
' 192.0.2.11 "$port" >/dev/null 2>"$work/s1/hold.log" &
	pids+=($!)
	disown $!
	rl 1 tenant set "$name" --rate 100000/s --burst 100000 --max-conns "$cap" \
		--match 192.0.2.64/28 --port "$port" --action rst >/dev/null || return 1
	reached "$name"
	for ((n = 0; n < 150; n++)); do
		held=$(ip netns exec "$lab-redis" redis-cli -h "$redis_ip" -p "$redis_port" \
			HVALS "rl:{t:$name}:slots" | awk '{ s += $1 } END { print s + 0 }')
		slots=$(rl 1 --json stats "$name" | jq -r '.[0].conn_slots')
		[[ $held == 0 && $slots == "$cap" ]] && break
		sleep 0.1
	done
	[[ $held == 0 && $slots == "$cap" ]] ||
		{ echo "tenant '$name' not cold: Redis holds $held, s1 may admit $slots" >&2; return 1; }
	held=$(ip netns exec "$lab-c1" python3 -c '
import socket, sys, time
held = []
for _ in range(int(sys.argv[3])):
    c = socket.socket()
    c.settimeout(0.5)
    try:
        c.connect((sys.argv[1], int(sys.argv[2])))
        held.append(c)
    except OSError:
        c.close()
time.sleep(0.5)
alive = 0
for c in held:
    c.setblocking(False)
    try:
        alive += c.recv(1) != b""
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(alive)
' 192.0.2.11 "$port" "$cap") || return 1
	rl 1 tenant del "$name" >/dev/null
	echo "$held $cap"
}

conn_burst conn-burst 50 >"$work/conn-burst" || die "the connection burst scenario did not run"
read -r cheld ccap <"$work/conn-burst"

limit=$((rate * secs + burst))
echo "# fleet: 3 hosts, limit $rate/s burst $burst, offered $offered/s for $secs s split" \
	"${weights[*]}; limit x T + burst = $limit"
echo "# adaptive leases: admitted $adm, Redis calls $calls ($leases granted tokens)," \
	"overshoot bound $bound, host 1 lease $lease"
echo "# lease size 1 (tenant --overshoot 3 = 3 agents x 1 token): admitted $adm1," \
	"Redis calls $calls1 ($leases1 granted tokens), overshoot bound $bound1, host 1 lease $lease1"
for pct in 85 95; do
	echo "# $pct% of $big/s (burst $((big / 10))), even then skewed 90/5/5, $secs s each:" \
		"$(awk '{ printf "%s offered at %s/s, %s refused, %s Redis calls for %s admitted; ", $1, $5, $2, $3, $4 }' "$work/under-$pct")"
done
awk -v a="$adm" -v c="$calls" -v a1="$adm1" -v c1="$calls1" -v l="$limit" \
	-v f85="$work/under-85" -v f95="$work/under-95" 'BEGIN {
	while ((getline line < f85) > 0) { split(line, x); o85 += x[1]; r85 += x[2]; c85 += x[3]; a85 += x[4] }
	while ((getline line < f95) > 0) { split(line, x); o95 += x[1]; r95 += x[2]; c95 += x[3]; a95 += x[4] }
	printf "fleet_accuracy %.3f ratio\n", a / l
	printf "fleet_redis_calls_per_admit %.3f calls\n", c / a
	printf "fleet_false_refusals_ratio_85pct %.5f ratio\n", r85 / o85
	printf "fleet_false_refusals_ratio_95pct %.5f ratio\n", r95 / o95
	printf "fleet_redis_calls_per_admit_95pct %.4f calls\n", c95 / a95
	printf "fleet_accuracy_lease1 %.3f ratio\n", a1 / l
	printf "fleet_redis_calls_per_admit_lease1 %.3f calls\n", c1 / a1
	printf "fleet_redis_calls_lease1_over_adaptive %.1f ratio\n", (c1 / a1) / (c / a)
}'
echo "# a cap of $ccap, cold, opened back to back onto one host of 3: $cheld held" \
	"(target >= 0.95: $(awk -v h="$cheld" -v c="$ccap" 'BEGIN { print ((h / c >= 0.95) ? "PASS" : "MISS") }'))"
awk -v h="$cheld" -v c="$ccap" 'BEGIN { printf "fleet_conncap_burst_held_ratio %.3f ratio\n", h / c }'
