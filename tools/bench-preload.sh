#!/usr/bin/env bash
# What librlpreload.so adds to a server's accept(): tests/accept_bench (N
# connections queued on loopback, then N accepts timed) without and with the
# library, alternately in the same run, in a network namespace of its own;
# with the library every connection is classified and spends a token of a
# tenant that matches it (a limit far above the load, so all are admitted).
# Then a server's connections per second below the limit: loadgen --serve
# (accept4) flooded by loadgen's client on loopback at more than this
# machine can carry, without and with the library, alternately; every
# connection is admitted, so the two rates differ only by the library's cost.
# Prints `name value unit` lines, then the added cost against its target.
#   tools/bench-preload.sh [BUILD_DIR]
set -uo pipefail

build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
bench=$build/tests/accept_bench
for f in "$bench" "$build/tests/rlpool" "$build/librlpreload.so" "$build/loadgen"; do
	[[ -e $f ]] || { echo "Error: $f not found; build it with 'make'" >&2; exit 1; }
done
[[ $(id -u) -eq 0 ]] || { echo "Error: the benchmark makes a network namespace; run it as root" >&2; exit 1; }

ns=rlbench-pre$$
dir=$(mktemp -d)
cleanup() {
	ip netns del "$ns" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns" && ip -n "$ns" link set lo up || exit 1
# a port rule among the tenant's: the library then also looks up the local
# port of each connection, the most it ever does
"$build/tests/rlpool" "$dir/pool" "127.0.0.0/8@1000000000/s@100000000" \
	"10.0.0.0/8@1/s@1@443" || exit 1
# the same with a connection cap far above the 200 in flight: each accept
# also takes a place and records its fd, each close gives it back
"$build/tests/rlpool" "$dir/capped" "127.0.0.0/8@1000000000/s@100000000@max=100000" \
	"10.0.0.0/8@1/s@1@443" || exit 1

run() {
	ip netns exec "$ns" env "$@" "$bench" 200 25 | awk '$1 == "accept_ns" { print $2 }'
}

# conn_rate [ENV...]: connections per second one loadgen --serve under ENV
# accepted from a client asking for more than it can take, for 2 s.
conn_rate() {
	local port=8080 sp n

	ip netns exec "$ns" env "$@" "$build/loadgen" --serve "127.0.0.1:$port" \
		--duration 3 >"$dir/serve.out" 2>/dev/null &
	sp=$!
	sleep 0.3
	n=$(ip netns exec "$ns" "$build/loadgen" --rate 100000 --duration 2 \
		--max-inflight 512 --json "127.0.0.1:$port" 2>/dev/null |
		jq -r '(.total.connected / .elapsed_s) | floor')
	wait "$sp"
	echo "${n:-}"
}

plain=() lib=() capped=()
for ((i = 0; i < 5; i++)); do
	plain+=("$(run X=1)")
	lib+=("$(run LD_PRELOAD="$build/librlpreload.so" RLGATE_POOL="$dir/pool")")
	capped+=("$(run LD_PRELOAD="$build/librlpreload.so" RLGATE_POOL="$dir/capped")")
done
rate_plain=() rate_lib=()
for ((i = 0; i < 3; i++)); do
	rate_plain+=("$(conn_rate X=1)")
	rate_lib+=("$(conn_rate LD_PRELOAD="$build/librlpreload.so" RLGATE_POOL="$dir/pool")")
done
median() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
p=$(median "${plain[@]}") l=$(median "${lib[@]}") c=$(median "${capped[@]}")
rp=$(median "${rate_plain[@]}") rl=$(median "${rate_lib[@]}")
admitted=$("$build/tests/rlpool" "$dir/pool" --stats | awk '$1 == "tenant" && $2 == 1 { print $3 }')
read -r admitted_c in_flight < <("$build/tests/rlpool" "$dir/capped" --stats |
	awk '$1 == "tenant" && $2 == 1 { print $3, $5 }')
if [[ -z $p || -z $l || -z $c || -z $rp || -z $rl || ${admitted:-0} -lt 25000 || ${admitted_c:-0} -lt 25000 ]]; then
	echo "Error: the accept benchmark did not run through the library (admitted ${admitted:-none})" >&2
	exit 1
fi
if [[ $in_flight != 0 ]]; then
	echo "Error: $in_flight connections still counted in flight once every one was closed" >&2
	exit 1
fi
echo "preload_accept_plain_ns $p ns"
echo "preload_accept_lib_ns $l ns"
echo "preload_accept_added_ns $((l - p)) ns"
echo "preload_accept_capped_ns $c ns"
echo "preload_accept_capped_added_ns $((c - p)) ns"
echo "preload_conn_rate_plain $rp conn/s"
echo "preload_conn_rate_lib $rl conn/s"
ratio=$(awk -v l="$rl" -v p="$rp" 'BEGIN { printf "%.3f", l / p }')
echo "preload_conn_rate_ratio $ratio x"
echo
printf '%-30s %8s %8s  %s\n' figure value target result
printf '%-30s %8s %8s  %s\n' preload_accept_added_ns $((l - p)) "<=1000" \
	"$( ((l - p <= 1000)) && echo PASS || echo MISS)"
printf '%-30s %8s %8s  %s\n' preload_accept_capped_added_ns $((c - p)) "<=1000" \
	"$( ((c - p <= 1000)) && echo PASS || echo MISS)"
printf '%-30s %8s %8s  %s\n' preload_conn_rate_ratio "$ratio" ">=0.95" \
	"$(awk -v r="$ratio" 'BEGIN { print (r >= 0.95 ? "PASS" : "MISS") }')"
