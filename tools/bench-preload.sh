#!/usr/bin/env bash
# What librlpreload.so adds to a server's accept(): tests/accept_bench (N
# connections queued on loopback, then N accepts timed) without and with the
# library, alternately in the same run, in a network namespace of its own;
# with the library every connection is classified and spends a token of a
# tenant that matches it (a limit far above the load, so all are admitted).
# Prints `name value unit` lines, then the added cost against its target.
#   tools/bench-preload.sh [BUILD_DIR]
set -uo pipefail

build=${1:-build}
[[ $build == /* ]] || build=$PWD/$build
bench=$build/tests/accept_bench
for f in "$bench" "$build/tests/rlpool" "$build/librlpreload.so"; do
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

plain=() lib=() capped=()
for ((i = 0; i < 5; i++)); do
	plain+=("$(run X=1)")
	lib+=("$(run LD_PRELOAD="$build/librlpreload.so" RLGATE_POOL="$dir/pool")")
	capped+=("$(run LD_PRELOAD="$build/librlpreload.so" RLGATE_POOL="$dir/capped")")
done
median() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
p=$(median "${plain[@]}") l=$(median "${lib[@]}") c=$(median "${capped[@]}")
admitted=$("$build/tests/rlpool" "$dir/pool" --stats | awk '$1 == "tenant" && $2 == 1 { print $3 }')
read -r admitted_c in_flight < <("$build/tests/rlpool" "$dir/capped" --stats |
	awk '$1 == "tenant" && $2 == 1 { print $3, $5 }')
if [[ -z $p || -z $l || -z $c || ${admitted:-0} -lt 25000 || ${admitted_c:-0} -lt 25000 ]]; then
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
echo
printf '%-30s %8s %8s  %s\n' figure ns target result
printf '%-30s %8s %8s  %s\n' preload_accept_added_ns $((l - p)) "<=1000" \
	"$( ((l - p <= 1000)) && echo PASS || echo MISS)"
printf '%-30s %8s %8s  %s\n' preload_accept_capped_added_ns $((c - p)) "<=1000" \
	"$( ((c - p <= 1000)) && echo PASS || echo MISS)"
