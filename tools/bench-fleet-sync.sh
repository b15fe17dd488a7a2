#!/usr/bin/env bash
# Fleet sync at scale: two hosts and one Redis.  The agent on s1 is given
# N = SCALE_TENANTS tenants (default 100,000, one /28 of 10.0.0.0/8 each)
# by one `rlctl apply`, which stores them in the fleet's policy store; then
# a new agent joins on s2 with an empty state and reads them all.  Then a
# change of one tenant on s1, and an apply on s1 that changes
# SYNC_CHANGES of them (default 10,000).  Prints `name value unit` lines:
#   fleet_sync_tenants          the tenants in the store
#   fleet_sync_100k_s           the new agent's start until it holds them all
#   fleet_sync_agent_cpu_s      the CPU time the new agent took meanwhile
#                               (its start, the reads, the change), which
#                               the load of the machine does not stretch
#   fleet_sync_redis_calls      the commands Redis served meanwhile (INFO
#                               commandstats, every client: both agents'
#                               heartbeats and leases too)
#   fleet_sync_policy_calls     the SSCAN pages and policy_get calls that
#                               read the store meanwhile (Redis's MONITOR)
#   fleet_change_ms             `rlctl tenant set` on s1 until s2 has it
#   fleet_apply_10k_s           the apply of SYNC_CHANGES changes on s1
#                               until s2 has the last of them
#   fleet_apply_10k_policy_calls  the policy_get calls of both agents
#                               for them (s1 reads its own changes back)
#   fleet_agent_idle_cpu_100k_pct  the CPU time of the busier agent over
#                               5 s once the fleet is quiet (no traffic,
#                               Redis serving fewer than 100 commands a
#                               second: the first leases paid, at 1,000
#                               a second per agent), in % of one core
#   fleet_bytes_per_tenant_agent  the joined agent's resident memory /
#                               tenants (rlctl status), once quiet: its
#                               lease state for each tenant on top of
#                               what a standalone agent holds
#   fleet_bytes_per_tenant_agent_own  its own part of that (heap and
#                               anonymous maps: not the kernel's maps it
#                               maps, not its files) / tenants
#   fleet_agent_outage_cpu_100k_pct  the same once Redis is stopped: the
#                               busier agent over 5 s, from 1 s after both
#                               say they are degraded, in % of one core
#   fleet_restart_100k_ms       the joined agent SIGKILLed and started
#                               again on its pins until it answers holding
#                               every tenant (median of three)
#   fleet_restart_healthy_100k_ms  ...until it leases again (healthy)
#   fleet_apply_del_90k_s       then an apply on s1 of a tenth of the
#                               tenants: the other nine tenths deleted,
#                               until s2 holds only the tenth
#   fleet_apply_del_90k_cpu_s   the CPU time both agents took meanwhile
#                               (taken before the outage, after which the
#                               whole set is applied again)
# The figures keep their names when SCALE_TENANTS is smaller.  Exits 1 when
# the benchmark could not run.
#   [SCALE_TENANTS=N] [SYNC_CHANGES=M] tools/bench-fleet-sync.sh [BUILD_DIR]  (root)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/bench-lib.bash"
build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
tenants=${SCALE_TENANTS:-100000}
changes=${SYNC_CHANGES:-10000}
redis_ip=192.0.2.250
redis_port=6379

[[ $tenants =~ ^[1-9][0-9]*$ ]] || die "SCALE_TENANTS '$tenants': expected a positive integer"
((tenants <= 1048576)) || die "SCALE_TENANTS '$tenants': at most 1048576 /28s fit in 10.0.0.0/8"
[[ $changes =~ ^[1-9][0-9]*$ ]] && ((changes <= tenants)) ||
	die "SYNC_CHANGES '$changes': expected a positive integer up to SCALE_TENANTS"
[[ $(id -u) -eq 0 ]] || die "the fleet sync benchmark builds network namespaces and attaches XDP; run it as root"
for f in rlagent rlctl pass.bpf.o; do
	[[ -e $build/$f ]] || die "$build/$f not found; build it with 'make'"
done
for c in redis-server redis-cli jq nsenter; do
	command -v "$c" >/dev/null || die "$c not found; run tools/deps.sh"
done

export RLGATE_BUILD=$build
lab=bfs$$
work=$(mktemp -d /tmp/rlgate-bench-fleet-sync.XXXXXX) || die "couldn't make a work directory"
pids=()

cleanup() {
	local p i

	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	"$root/tools/lab.sh" down "$lab" >/dev/null 2>&1
	for i in 1 2; do
		rm -rf "/sys/fs/bpf/rlgate-$lab-s$i"
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

rl() {
	local i=$1

	shift
	"$build/rlctl" --socket "$work/s$i/sock" "$@"
}

rcli() {
	ip netns exec "$lab-redis" redis-cli -h "$redis_ip" -p "$redis_port" "$@"
}

# redis_served: the commands Redis has served since its stats were reset.
redis_served() {
	rcli INFO commandstats | tr -d '\r' |
		awk -F'[=,]' '/^cmdstat_/ { n += $2 } END { print n + 0 }'
}

# cpu_ticks PID: the user and system time the process has taken.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# agent_up I: rlagent on sI in fleet mode, sized for the tenants.
agent_up() {
	local i=$1 n

	mkdir -p "$work/s$i/state"
	nsenter --net="/run/netns/$lab-s$i" "$build/rlagent" --iface eth0 \
		--redis "$redis_ip:$redis_port" --agent-id "s$i" --control "$work/s$i/sock" \
		--state-dir "$work/s$i/state" --pin-dir "/sys/fs/bpf/rlgate-$lab-s$i" \
		--max-tenants "$tenants" --log-level warn >>"$work/s$i/agent.log" 2>&1 &
	pids+=($!)
	agent_pid[i]=$!
	disown $!	# killed by PID at exit; no job notices
	for ((n = 0; n < 6000; n++)); do
		rl "$i" status >/dev/null 2>&1 && return 0
		sleep 0.01
	done
	cat "$work/s$i/agent.log" >&2
	die "rlagent on s$i does not answer"
}

# held I: the tenants agent I holds.
held() {
	rl "$1" --json status | jq -r .tenants
}

# wait_held I N SECONDS: until agent I holds N tenants.
wait_held() {
	local n

	for ((n = 0; n < $3 * 50; n++)); do
		[[ $(held "$1") == "$2" ]] && return 0
		sleep 0.02
	done
	tail -5 "$work/s$1/agent.log" >&2
	die "s$1 holds $(held "$1") tenants after $3 s, expected $2"
}

# quiet: until Redis serves fewer than 100 commands a second (the first
# leases paid), at most 300 s.
quiet() {
	local n c0

	for ((n = 0; n < 300; n++)); do
		c0=$(redis_served)
		sleep 1
		(($(redis_served) - c0 < 100)) && return 0
	done
	die "Redis still serves 100 commands a second or more after 300 s"
}

# monitor_start / monitor_stop: Redis's MONITOR into $work/monitor; then
# the store's reads it saw (SSCAN of rl:tenants, policy_get by its SHA).
monitor_start() {
	rcli MONITOR >"$work/monitor" 2>/dev/null &
	monitor=$!
	pids+=("$monitor")
	sleep 0.2
}
monitor_stop() {
	local sha

	kill "$monitor" 2>/dev/null
	wait "$monitor" 2>/dev/null
	sha=$(sha1sum "$root/lua/policy_get.lua" | cut -c1-40)
	grep -c -e '"SSCAN" "rl:tenants"' -e "\"EVALSHA\" \"$sha\"" "$work/monitor"
}

# set_file FILE RATE K [M]: the N tenants (or the first M), the first K of
# them at RATE/s, the others at 100/s.
set_file() {
	jq -n --argjson n "${4:-$tenants}" --argjson k "$3" --arg r "$2" '{tenants: [range($n) as $i |
		($i * 16) as $a | {name: "t\($i)", rate: (if $i < $k then "\($r)/s"
		else "100/s" end), burst: 100, match: ["10.\($a / 65536 | floor).\(($a /
		256 | floor) % 256).\($a % 256)/28"]}]}' >"$1" || die "couldn't write the tenant set"
}

"$root/tools/lab.sh" up "$lab" --servers 2 --clients 0 --redis >"$work/lab.log" 2>&1 ||
	{ cat "$work/lab.log" >&2; die "couldn't build the lab"; }
redis_up "$redis_port"
redis_pid=${pids[-1]}
hz=$(getconf CLK_TCK)

set_file "$work/set.json" 100 0
agent_up 1
# rlctl gives up after 10 s; an agent that takes longer still applies the
# set whole, and publishes it
rl 1 apply "$work/set.json" >/dev/null 2>&1 || true
for ((n = 0; n < 1200; n++)); do
	[[ $(rcli SCARD rl:tenants) == "$tenants" ]] && break
	sleep 0.1
done
((n < 1200)) || die "the store holds $(rcli SCARD rl:tenants) tenants, expected $tenants"

rcli CONFIG RESETSTAT >/dev/null
monitor_start
t0=$(now_ms)
agent_up 2
wait_held 2 "$tenants" 120
t1=$(now_ms)
sync_cpu=$(awk -v d="$(cpu_ticks "${agent_pid[2]}")" -v hz="$hz" 'BEGIN { printf "%.2f", d / hz }')
sync_redis=$(redis_served)
sync_policy=$(monitor_stop)

# One change on s1 until s2 has it.
rl 1 tenant set t7 --rate 250/s >/dev/null || die "rlctl tenant set failed on s1"
t2=$(now_ms)
for ((n = 0; n < 1000; n++)); do
	[[ $(rl 2 --json tenant get t7 | jq -r .rate) == 250/s ]] && break
	sleep 0.005
done
((n < 1000)) || die "s2 does not have t7's change after 5 s"
t3=$(now_ms)

# An apply of SYNC_CHANGES changes on s1 until s2 has the last of them.
set_file "$work/set2.json" 300 "$changes"
last=t$((changes - 1))
monitor_start
t4=$(now_ms)
# the same; s2 having the last change is what is timed
rl 1 apply "$work/set2.json" >/dev/null 2>&1 || true
for ((n = 0; n < 6000; n++)); do
	[[ $(rl 2 --json tenant get "$last" | jq -r .rate) == 300/s ]] && break
	sleep 0.01
done
((n < 6000)) || die "s2 does not have $last's change after 60 s"
t5=$(now_ms)
[[ $(rl 2 --json tenant get t0 | jq -r .rate) == 300/s ]] || die "s2 does not have t0's change"
apply_policy=$(monitor_stop)

# Idle: once the first leases are paid, at most 300 s.
quiet
idle=0
for i in 1 2; do
	u0[i]=$(cpu_ticks "${agent_pid[i]}")
done
sleep 5
for i in 1 2; do
	pct=$(awk -v d="$(($(cpu_ticks "${agent_pid[i]}") - u0[i]))" -v hz="$hz" \
		'BEGIN { printf "%.1f", d * 100 / hz / 5 }')
	awk -v a="$pct" -v b="$idle" 'BEGIN { exit !(a > b) }' && idle=$pct
done

# The joined agent's memory, every tenant held and the fleet quiet.
mem=$(rl 2 --json status | jq -ec .memory) || die "rlctl status on s2 gave no memory"
rss=$(jq .agent_rss_bytes <<<"$mem")
anon=$(jq .agent_anon_bytes <<<"$mem")

# s2's agent killed and started again on its pins, three times: until it
# answers holding every tenant (the program enforces all along), and until
# it leases again (healthy).
restart=() healthy=()
for ((r = 0; r < 3; r++)); do
	kill -KILL "${agent_pid[2]}"
	while kill -0 "${agent_pid[2]}" 2>/dev/null; do sleep 0.01; done
	t6=$(now_ms)
	agent_up 2
	wait_held 2 "$tenants" 60
	t7=$(now_ms)
	for ((n = 0; n < 3000; n++)); do
		[[ $(rl 2 --json status | jq -r .broker) == healthy ]] && break
		sleep 0.01
	done
	((n < 3000)) || die "s2 is not healthy 30 s after its restart"
	restart+=($((t7 - t6)))
	healthy+=($(($(now_ms) - t6)))
done

# Most of the tenants deleted on s1 in one apply (the first tenth kept as
# they are) until s2 holds only them; then the whole set again, and a
# quiet fleet, for the outage below.
keep=$((tenants / 10 ? tenants / 10 : 1))
set_file "$work/keep.json" 300 "$changes" "$keep"
for i in 1 2; do
	u0[i]=$(cpu_ticks "${agent_pid[i]}")
done
t8=$(now_ms)
rl 1 apply "$work/keep.json" >/dev/null 2>&1 || true
wait_held 2 "$keep" 120
t9=$(now_ms)
del_cpu=$(awk -v d="$(($(cpu_ticks "${agent_pid[1]}") - u0[1] + \
	$(cpu_ticks "${agent_pid[2]}") - u0[2]))" -v hz="$hz" 'BEGIN { printf "%.2f", d / hz }')
rl 1 apply "$work/set2.json" >/dev/null 2>&1 || true
wait_held 2 "$tenants" 120
quiet

# Redis stopped: the agents degraded, their checks still every 50 ms.
kill -KILL "$redis_pid"
for i in 1 2; do
	for ((n = 0; n < 500; n++)); do
		[[ $(rl "$i" --json status | jq -r .broker) == degraded ]] && break
		sleep 0.02
	done
	((n < 500)) || die "s$i is not degraded 10 s after Redis stopped"
done
sleep 1
for i in 1 2; do
	u0[i]=$(cpu_ticks "${agent_pid[i]}")
done
sleep 5
outage=0
for i in 1 2; do
	pct=$(awk -v d="$(($(cpu_ticks "${agent_pid[i]}") - u0[i]))" -v hz="$hz" \
		'BEGIN { printf "%.1f", d * 100 / hz / 5 }')
	awk -v a="$pct" -v b="$outage" 'BEGIN { exit !(a > b) }' && outage=$pct
done

echo "fleet_sync_tenants $tenants tenants"
echo "fleet_sync_100k_s $(awk -v m="$((t1 - t0))" 'BEGIN { printf "%.2f", m / 1000 }') s"
echo "fleet_sync_agent_cpu_s $sync_cpu s"
echo "fleet_sync_redis_calls $sync_redis calls"
echo "fleet_sync_policy_calls $sync_policy calls"
echo "fleet_change_ms $((t3 - t2)) ms"
echo "fleet_apply_10k_s $(awk -v m="$((t5 - t4))" 'BEGIN { printf "%.2f", m / 1000 }') s"
echo "fleet_apply_10k_policy_calls $apply_policy calls"
echo "fleet_agent_idle_cpu_100k_pct $idle %"
echo "fleet_bytes_per_tenant_agent $((rss / tenants)) bytes"
echo "fleet_bytes_per_tenant_agent_own $((anon / tenants)) bytes"
echo "fleet_agent_outage_cpu_100k_pct $outage %"
echo "fleet_restart_100k_ms $(median "${restart[@]}") ms"
echo "fleet_restart_healthy_100k_ms $(median "${healthy[@]}") ms"
echo "fleet_apply_del_90k_s $(awk -v m="$((t9 - t8))" 'BEGIN { printf "%.2f", m / 1000 }') s"
echo "fleet_apply_del_90k_cpu_s $del_cpu s"
