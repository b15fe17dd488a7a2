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

die() {
	echo "Error: $*" >&2
	exit 1
}

[[ $(id -u) -eq 0 ]] || die "the control benchmark builds a network namespace and attaches XDP; run it as root"
for f in rlagent rlctl pass.bpf.o; do
	[[ -e $build/$f ]] || die "$build/$f not found; build it with 'make'"
done
for c in jq nsenter; do
	command -v "$c" >/dev/null || die "$c not found; run tools/deps.sh"
done

export RLGATE_BUILD=$build
lab=bc$$
work=$(mktemp -d /tmp/rlgate-bench-ctl.XXXXXX) || die "couldn't make a work directory"
pin=/sys/fs/bpf/rlgate-$lab
agent=

cleanup() {
	[[ -n $agent ]] && kill -KILL "$agent" 2>/dev/null
	"$root/tools/lab.sh" down "$lab" >/dev/null 2>&1
	rm -rf "$pin" "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

rl() {
	"$build/rlctl" --socket "$work/sock" "$@"
}

# ms CMD...: the wall time of CMD in milliseconds; fails with CMD.
ms() {
	local t0 t1

	t0=$(date +%s%N)
	"$@" >/dev/null || return 1
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

# median N...: the middle value.
median() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

"$root/tools/lab.sh" up "$lab" --servers 1 --clients 0 >"$work/lab.log" 2>&1 ||
	{ cat "$work/lab.log" >&2; die "couldn't build the lab"; }

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
for ((n = 0; n < 600; n++)); do
	rl status >/dev/null 2>&1 && break
	kill -0 "$agent" 2>/dev/null || { cat "$work/rlagent.log" >&2; die "rlagent exited"; }
	sleep 0.1
done
((n < 600)) || { cat "$work/rlagent.log" >&2; die "rlagent does not answer"; }
[[ $(rl --json tenant list | jq length) == "$tenants" ]] ||
	{ cat "$work/rlagent.log" >&2; die "the agent did not load $tenants tenants"; }

list=() set=() match=()
for ((r = 0; r < runs; r++)); do
	list+=("$(ms rl --json tenant list)") || die "rlctl tenant list failed"
	# a new limit: the tenant's bucket changes, its rules stay
	set+=("$(ms rl tenant set "t$((r * 797 % tenants))" --rate "$((200 + r))/s")") ||
		die "rlctl tenant set --rate failed"
	# 64 new prefixes: every rule is compiled and published again
	m=$(for ((j = 0; j < prefixes; j++)); do echo "14.$r.$j.0/24"; done | paste -sd,)
	match+=("$(ms rl tenant set "t$((r * 797 % tenants + 1))" --match "$m")") ||
		die "rlctl tenant set --match failed"
done
[[ $(rl --json tenant list | jq length) == "$tenants" ]] || die "the agent lost tenants"
echo "ctl_tenant_list_ms $(median "${list[@]}") ms"
echo "ctl_tenant_set_ms $(median "${set[@]}") ms"
echo "ctl_tenant_set_match_ms $(median "${match[@]}") ms"
