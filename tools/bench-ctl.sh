#!/usr/bin/env bash
# Control-plane benchmark: one rlagent holding 4,096 tenants of 64 prefixes
# each (262,144 rules), and how long `rlctl tenant set` of one of them takes,
# from the command line to the kernel.  The baseline, measured in the same
# run, is `rlctl --json tenant list` of the same set: the agent encoding the
# whole set as JSON and rlctl parsing it, which a change costs at least once
# too (the state file holds the whole set).  Two changes are timed: a new
# rate (the rules stay) and 64 new prefixes (every rule is compiled again).
# Prints `name value unit` lines, each the median of several runs.  Exits 1
# when the benchmark could not run.
#   tools/bench-ctl.sh [BUILD_DIR]      (root)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
tenants=4096
prefixes=64
runs=5

. "$(dirname "$0")/bench-lib.bash"

bench_lab bc ctl

# The agent starts with the set in its state file (one `rlctl apply` of it
# would exceed the control protocol's line).  Tenant i owns the /24s number
# i*64+j (j < 64) of 10.0.0.0/6: no two overlap.
mkdir -p "$work/state" && chmod 700 "$work/state"
jq -n --argjson n "$tenants" --argjson m "$prefixes" '{version: 1, deleted: [],
	tenants: [range($n) as $i | {name: "t\($i)", id: $i, version: 1, rate: "100/s",
	burst: 100, match: [range($m) as $j | ($i * $m + $j) as $k |
	"\(10 + ($k / 65536 | floor)).\(($k / 256 | floor) % 256).\($k % 256).0/24"]}]}' \
	>"$work/state/policy.json" || die "couldn't write the tenant set"

nsenter --net="/run/netns/$lab-s1" "$build/rlagent" --iface eth0 --control "$work/sock" \
	--state-dir "$work/state" --pin-dir "$pin" --metrics 127.0.0.1:9464 \
	--log-level warn >"$work/rlagent.log" 2>&1 &
agent=$!
disown "$agent"	# killed by PID at exit; no job notices
wait_agent "$agent" "$work/rlagent.log"
[[ $(rl --json tenant list | jq length) == "$tenants" ]] ||
	{ cat "$work/rlagent.log" >&2; die "the agent did not load $tenants tenants"; }

list=() set=() match=()
for ((r = 0; r < runs; r++)); do
	list+=("$(ms rl --json tenant list)") || die "rlctl tenant list failed"
	# a new limit: the tenant's bucket changes, its rules stay
	set+=("$(ms rl tenant set "t$((r * 797 % tenants))" --rate "$((200 + r))/s")") ||
		die "rlctl tenant set --rate failed"
	# 64 new prefixes: checked against every claim and repainted in place
	m=$(for ((j = 0; j < prefixes; j++)); do echo "14.$r.$j.0/24"; done | paste -sd,)
	match+=("$(ms rl tenant set "t$((r * 797 % tenants + 1))" --match "$m")") ||
		die "rlctl tenant set --match failed"
done
[[ $(rl --json tenant list | jq length) == "$tenants" ]] || die "the agent lost tenants"
echo "ctl_tenant_list_ms $(median "${list[@]}") ms"
echo "ctl_tenant_set_ms $(median "${set[@]}") ms"
echo "ctl_tenant_set_match_ms $(median "${match[@]}") ms"
