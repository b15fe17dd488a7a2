#!/usr/bin/env bash
# Fleet simulation: N agents (3, 30, 300 by default) leasing one tenant's
# tokens through lua/lease.lua from a private redis-server on a unix socket,
# each sized by user/lib/lease.c, at twice the limit (SIM_OFFERED) spread evenly and skewed
# 90/10, the tenant whole and split into 3 sub-buckets (user/lib/hot.c; the
# split's lines end in _k3).  Prints `name value unit` lines; exits 1 when
# it could not run.
#   tools/bench-sim.sh [BUILD_DIR]   (SIM_SECONDS per run, default 2;
#                                     SIM_AGENTS, default "3 30 300";
#                                     SIM_SHARDS, default "1 3";
#                                     SIM_RATE per second, default 10000)
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
secs=${SIM_SECONDS:-2}
rate=${SIM_RATE:-10000}
read -ra agents <<<"${SIM_AGENTS:-3 30 300}"
read -ra shards <<<"${SIM_SHARDS:-1 3}"

[[ -x $build/fleet-sim ]] || { echo "Error: $build/fleet-sim not found; build it with 'make'" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "Error: redis-server not found (tools/deps.sh)" >&2; exit 1; }

dir=$(mktemp -d)
sock=$dir/redis.sock
redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no \
	--daemonize no --dir "$dir" >"$dir/redis.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do
	[[ -S $sock ]] && redis-cli -s "$sock" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -s "$sock" ping >/dev/null 2>&1 || { echo "Error: redis-server did not start" >&2; exit 1; }

for n in "${agents[@]}"; do
	for load in even skew; do
		for k in "${shards[@]}"; do
			sfx=_k$k
			((k == 1)) && sfx=
			"$build/fleet-sim" "$sock" "$root/lua/lease.lua" "$n" "$secs" \
				"$rate" "${SIM_OFFERED:-2}" "$load" "sim_${n}_${load}$sfx" \
				"$k" || exit 1
		done
	done
done
