#!/usr/bin/env bash
# Scale benchmark of the control plane: one standalone rlagent (no Redis,
# no traffic, --max-tenants N) given N = SCALE_TENANTS tenants (default
# 100,000) of SCALE_PREFIXES prefixes each (default 1, a /28 of
# 10.0.0.0/8 each, none overlapping) by one `rlctl apply`, then changes
# of one tenant among them (its limits, a deletion, a new tenant, its
# prefixes), the memory they take, and a restart of the agent that adopts
# the pins (and replays the journal of those changes).
# Prints `name value unit` lines:
#   scale_tenants          the tenants loaded
#   ctl_apply_100k_s       `rlctl apply` of the whole set to an empty agent
#   ctl_apply_100k_cpu_ms  the CPU time (user and system) rlctl and the
#                          agent spent on it: the wall time grows with the
#                          load, this does not
#   ctl_tenant_set_ms      `rlctl tenant set --rate` of one of them (median)
#   ctl_tenant_del_ms      `rlctl tenant del` of one of them (median)
#   ctl_tenant_add_ms      `rlctl tenant set` of a new tenant (median)
#   ctl_tenant_prefix_ms   `rlctl tenant set --match` moving one of them to
#                          other prefixes (median)
#   agent_restart_100k_ms  SIGKILL, then a new agent on the pins until its
#                          control socket answers with every tenant (median
#                          of three)
#   agent_restart_100k_cpu_ms  the CPU time (user and system) the new agent
#                          spent until then (/proc/PID/stat): the same work
#                          whatever else the machine runs (median of three)
#   ctl_tenant_set_rewrite_ms  `rlctl tenant set --rate` of one of them when
#                          the journal is full, in an agent just restarted:
#                          until it is answered (median of three)
#   state_rewrite_100k_ms  the same change until the state file is written
#                          whole and the journal gone (the agent does that
#                          after it answers; median of three)
#   bytes_per_tenant_kernel  the pinned maps' keys and values (per-CPU
#                            ones per CPU) / tenants, as rlctl status says
#   bytes_per_tenant_agent   the agent's resident memory / tenants (rlctl
#                            status)
#   bytes_per_tenant_agent_own  the agent's own part of it (its heap and
#                            anonymous maps, without the kernel's maps it
#                            maps and its files) / tenants (rlctl status)
#   agent_idle_cpu_100k_pct  the agent's CPU time over 5 s with them all and
#                            nothing to do, in % of one core (/proc/PID/stat)
#   metrics_scrape_100k_ms   one scrape of /metrics (--metrics-tenants
#                            1000, the default), median of five
#   metrics_loop_stall_ms    the longest one turn of the event loop took,
#                            in which the control socket, leases and
#                            timers wait, over the idle seconds above (each
#                            with its sweep of the counters) and the five
#                            scrapes: whatever ran in it - a slice of a
#                            scrape or a sweep, a request, the tick - in the
#                            agent's CPU time (rlctl status's
#                            loop.turn_cpu_us_by_s), which other processes
#                            taking the CPU do not lengthen
#   metrics_loop_stall_wall_ms  the same in wall time, theirs included
#   ctl_apply_del_90k_s    last, `rlctl apply` of a tenth of the tenants:
#                          the other nine tenths deleted in one change
#   ctl_apply_del_90k_cpu_ms  the CPU time (user and system) rlctl and the
#                          agent spent on it
#   bytes_per_tenant_kernel_ports  last, on fresh pins, N tenants of a /30
#                          and port 80 each (--max-tenants N alone): the
#                          pinned maps / tenants, as above
#   bytes_per_tenant_agent_ports  the agent's resident memory / tenants
#   bytes_per_tenant_agent_own_ports  its own part of it / tenants
#   agent_rss_100k_ports_mib  the agent's resident memory with them
# The figures keep their names when SCALE_TENANTS is smaller.  Exits 1 when
# the benchmark could not run.
#   [SCALE_TENANTS=N] [SCALE_PREFIXES=M] tools/bench-scale.sh [BUILD_DIR]  (root)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/bench-lib.bash"
build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
tenants=${SCALE_TENANTS:-100000}
prefixes=${SCALE_PREFIXES:-1}
runs=5

[[ $tenants =~ ^[1-9][0-9]*$ ]] || die "SCALE_TENANTS '$tenants': expected a positive integer"
[[ $prefixes =~ ^[1-9][0-9]*$ ]] || die "SCALE_PREFIXES '$prefixes': expected a positive integer"
((tenants * prefixes <= 1048576)) ||
	die "SCALE_TENANTS x SCALE_PREFIXES: at most 1048576 /28s fit in 10.0.0.0/8"
bench_lab bs scale

start_agent() {
	nsenter --net="/run/netns/$lab-s1" "$build/rlagent" --iface eth0 \
		--control "$work/sock" --state-dir "$work/state" --pin-dir "$pin" \
		--max-tenants "$tenants" ${SCALE_AGENT_ARGS:-} --log-level warn \
		>>"$work/rlagent.log" 2>&1 &
	agent=$!
	disown "$agent"	# killed by PID at exit; no job notices
}

count() {
	rl --json tenant list | jq length
}

# timed_apply FILE N: `rlctl apply FILE`, after which the agent must hold N
# tenants; its wall time in $took and the CPU time (user and system) rlctl
# and the agent spent on it in $took_cpu, in ms.
TIMEFORMAT='%3U %3S'
timed_apply() {
	local c0 c1

	c0=$(awk '{ print $14 + $15 }' "/proc/$agent/stat")
	{ time took=$(ms rl apply "$1"); } 2>"$work/apply.time" ||
		{ tail -n 5 "$work/rlagent.log" "$work/apply.time" >&2; die "rlctl apply of $2 tenants failed"; }
	c1=$(awk '{ print $14 + $15 }' "/proc/$agent/stat")
	took_cpu=$(awk -v d="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
		'{ printf "%d", ($1 + $2) * 1000 + d * 1000 / hz }' "$work/apply.time")
	[[ $(count) == "$2" ]] || die "the agent does not hold $2 tenants after rlctl apply"
}

# Tenant i owns the /28s number i*M+j (j < M) of 10.0.0.0/8.
jq -n --argjson n "$tenants" --argjson m "$prefixes" '{tenants: [range($n) as $i |
	{name: "t\($i)", rate: "100/s", burst: 100, match: [range($m) as $j |
	(($i * $m + $j) * 16) as $k | "10.\($k / 65536 | floor).\(($k / 256 | floor) %
	256).\($k % 256)/28"]}]}' >"$work/set.json" || die "couldn't write the tenant set"

mkdir -p "$work/state" && chmod 700 "$work/state"
start_agent
wait_agent "$agent" "$work/rlagent.log"
timed_apply "$work/set.json" "$tenants"
apply=$took apply_cpu=$took_cpu

set=()
for ((r = 0; r < runs; r++)); do
	set+=("$(ms rl tenant set "t$((r * 7919 % tenants))" --rate "$((200 + r))/s")") ||
		die "rlctl tenant set --rate failed"
done

# Deletions and new tenants (the set stays at $tenants, within
# --max-tenants), then changes of prefixes: /28s of 11.0.0.0/8.
del=() add=() pfx=()
for ((r = 0; r < runs; r++)); do
	del+=("$(ms rl tenant del "t$(((r * 7919 + 1) % tenants))")") ||
		die "rlctl tenant del failed"
	add+=("$(ms rl tenant set "new$r" --rate 100/s --match "11.0.$r.0/28")") ||
		die "rlctl tenant set of a new tenant failed"
	pfx+=("$(ms rl tenant set "t$(((r * 7919 + 2) % tenants))" --rate 100/s \
		--match "11.1.$r.0/28,11.2.$r.0/28")") ||
		die "rlctl tenant set --match failed"
done
[[ $(count) == "$tenants" ]] || die "the agent does not hold $tenants tenants after the changes"

# Idle: what the agent spends with nothing to do but its periodic work.
sleep 2
quiet=$(date +%s%N)
cpu0=$(awk '{ print $14 + $15 }' "/proc/$agent/stat")
sleep 5
cpu1=$(awk '{ print $14 + $15 }' "/proc/$agent/stat")
idle=$(awk -v d="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" \
	'BEGIN { printf "%.1f", d * 100 / hz / 5 }')

scrape=()
for ((r = 0; r < runs; r++)); do
	scrape+=("$(ms nsenter --net="/run/netns/$lab-s1" curl -sf -o /dev/null \
		http://127.0.0.1:9464/metrics)") || die "couldn't scrape the agent's metrics"
done
scrapes=$(rl --json status | jq -c .metrics) || die "rlctl status failed"
# the loop's longest turns by the second, from the one idle began in
turns=$(rl --json status | jq -c --argjson s "$((($(date +%s%N) - quiet) / 1000000000 + 1))" \
	'.loop | {wall: (.turn_us_by_s[:$s] | max), cpu: (.turn_cpu_us_by_s[:$s] | max)}') ||
	die "rlctl status failed"
[[ $(jq .scrapes <<<"$scrapes") == "$runs" ]] ||
	die "rlctl status counts $(jq .scrapes <<<"$scrapes") scrapes, not $runs"

mem=$(rl --json status | jq -c .memory) || die "rlctl status failed"
kbytes=$(jq .kernel_map_bytes <<<"$mem")
rss=$(jq .agent_rss_bytes <<<"$mem")
anon=$(jq .agent_anon_bytes <<<"$mem")

# A crash, then a new agent that adopts the pins (enforcement never stops);
# three times, the first after the journal of the changes above.
restart=() restart_cpu=()
for ((r = 0; r < 3; r++)); do
	kill -KILL "$agent"
	while kill -0 "$agent" 2>/dev/null; do sleep 0.01; done
	t0=$(date +%s%N)
	start_agent
	wait_agent "$agent" "$work/rlagent.log"
	t1=$(date +%s%N)
	restart+=("$(((t1 - t0) / 1000000))")
	restart_cpu+=("$(awk -v hz="$(getconf CLK_TCK)" \
		'{ print int(($14 + $15) * 1000 / hz) }' "/proc/$agent/stat")")
	[[ $(count) == "$tenants" ]] || die "the restarted agent does not hold $tenants tenants"
done

# The journal full (AGENT_JOURNAL_MAX, 4 MiB): the next change writes the
# state file whole.  Filled with lines older than policy.json, which the
# new agent's start reads and skips; the change is the first after it.
rewrite=() whole=()
for ((r = 0; r < 3; r++)); do
	kill -KILL "$agent"
	while kill -0 "$agent" 2>/dev/null; do sleep 0.01; done
	yes '{"version":1,"deleted":{"name":"old","version":1}}' | head -n 85000 \
		>>"$work/state/policy.journal"
	start_agent
	wait_agent "$agent" "$work/rlagent.log"
	t0=$(date +%s%N)
	rl tenant set "t$(((r * 7919 + 3) % tenants))" --rate "$((300 + r))/s" >/dev/null ||
		die "rlctl tenant set with the journal full failed"
	t1=$(date +%s%N)
	for ((i = 0; i < 1000; i++)); do
		[[ -e $work/state/policy.journal ]] || break
		sleep 0.005
	done
	[[ ! -e $work/state/policy.journal ]] ||
		die "the journal was not folded into the state file"
	t2=$(date +%s%N)
	rewrite+=($(((t1 - t0) / 1000000)))
	whole+=($(((t2 - t0) / 1000000)))
done

# Most of the tenants deleted in one change: an apply of the first tenth
# (at least one) of those the agent holds, as they are; each of the others
# gets a tombstone.
keep=$((tenants / 10 ? tenants / 10 : 1))
rl --json tenant list | jq --argjson k "$keep" '{tenants: .[:$k]}' >"$work/keep.json" ||
	die "couldn't write the tenants to keep"
timed_apply "$work/keep.json" "$keep"

# Last, the usual SaaS shape on fresh pins: each tenant one /30 and the
# service's port, with --max-tenants alone sizing everything.
rl detach eth0 >/dev/null 2>&1
kill -KILL "$agent" 2>/dev/null	# rlctl detach may have stopped it
while kill -0 "$agent" 2>/dev/null; do sleep 0.01; done
ip -n "$lab-s1" link set dev eth0 xdp off 2>/dev/null
rm -rf "$pin" "$work/state" && mkdir -p "$work/state" && chmod 700 "$work/state" ||
	die "couldn't clear the pins and the state for the ported set"
jq -n --argjson n "$tenants" '{tenants: [range($n) as $i | ($i * 4) as $k |
	{name: "p\($i)", rate: "100/s", burst: 100, ports: [80], match:
	["10.\($k / 65536 | floor).\(($k / 256 | floor) % 256).\($k % 256)/30"]}]}' \
	>"$work/ported.json" || die "couldn't write the ported tenant set"
start_agent
wait_agent "$agent" "$work/rlagent.log"
timed_apply "$work/ported.json" "$tenants"
mem=$(rl --json status | jq -c .memory) || die "rlctl status failed"
pkbytes=$(jq .kernel_map_bytes <<<"$mem")
prss=$(jq .agent_rss_bytes <<<"$mem")
panon=$(jq .agent_anon_bytes <<<"$mem")

echo "scale_tenants $tenants tenants"
echo "ctl_apply_100k_s $(awk -v m="$apply" 'BEGIN { printf "%.2f", m / 1000 }') s"
echo "ctl_apply_100k_cpu_ms $apply_cpu ms"
echo "ctl_tenant_set_ms $(median "${set[@]}") ms"
echo "ctl_tenant_del_ms $(median "${del[@]}") ms"
echo "ctl_tenant_add_ms $(median "${add[@]}") ms"
echo "ctl_tenant_prefix_ms $(median "${pfx[@]}") ms"
echo "agent_restart_100k_ms $(median "${restart[@]}") ms"
echo "agent_restart_100k_cpu_ms $(median "${restart_cpu[@]}") ms"
echo "ctl_tenant_set_rewrite_ms $(median "${rewrite[@]}") ms"
echo "state_rewrite_100k_ms $(median "${whole[@]}") ms"
echo "bytes_per_tenant_kernel $((kbytes / tenants)) bytes"
echo "bytes_per_tenant_agent $((rss / tenants)) bytes"
echo "bytes_per_tenant_agent_own $((anon / tenants)) bytes"
echo "agent_idle_cpu_100k_pct $idle %"
echo "metrics_scrape_100k_ms $(median "${scrape[@]}") ms"
echo "metrics_loop_stall_ms $(jq '.cpu / 100 | round / 10' <<<"$turns") ms"
echo "metrics_loop_stall_wall_ms $(jq '.wall / 100 | round / 10' <<<"$turns") ms"
echo "ctl_apply_del_90k_s $(awk -v m="$took" 'BEGIN { printf "%.2f", m / 1000 }') s"
echo "ctl_apply_del_90k_cpu_ms $took_cpu ms"
echo "bytes_per_tenant_kernel_ports $((pkbytes / tenants)) bytes"
echo "bytes_per_tenant_agent_ports $((prss / tenants)) bytes"
echo "bytes_per_tenant_agent_own_ports $((panon / tenants)) bytes"
echo "agent_rss_100k_ports_mib $((prss / 1048576)) MiB"
