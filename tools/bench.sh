#!/usr/bin/env bash
# Per-packet benchmark of the XDP program: runs `test_xdp --bench` and prints
# each figure with its target and PASS/MISS.  A missed target is a result, not
# an error (exit 0); a benchmark that could not run exits 1.
#   tools/bench.sh [BUILD_DIR]
set -uo pipefail

build=${1:-build}
bin=$build/tests/test_xdp

if [[ ! -x $bin ]]; then
	echo "Error: $bin not found; build it with 'make $bin'" >&2
	exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "Error: the benchmark loads BPF programs; run it as root" >&2
	exit 1
fi

out=$("$bin" --bench)
rc=$?
if ((rc != 0)); then
	echo "Error: '$bin --bench' exited $rc" >&2
	exit 1
fi

# The figures as measured, one `name value unit` line each; the table below
# puts them against their targets.
echo "$out"
echo

declare -A val unit
while read -r name value u; do
	[[ -n $name ]] || continue
	val[$name]=$value
	unit[$name]=$u
done <<<"$out"

# judge HEADING SUFFIX BASE ROW...: a table of figures against their
# targets, each ROW "name target" (target -: none).  A figure's ratio is the
# one the benchmark printed as name_SUFFIX; where it printed none, the
# figure's ratio to the figure BASE (BASE itself: 1.00), or an error where
# BASE is -.  Exits 1 when a figure or a ratio it needs is missing.
judge() {
	local heading=$1 suffix=$2 base=$3 row name target ratio shown result

	shift 3
	printf '%-22s %10s %8s %8s  %s\n' figure ns "$heading" target result
	for row; do
		read -r name target <<<"$row"
		if [[ -z ${val[$name]:-} ]]; then
			echo "Error: the benchmark printed no $name" >&2
			exit 1
		fi
		ratio=${val[${name}_$suffix]:-}
		if [[ $name == "$base" ]]; then
			ratio=1.00
		elif [[ -z $ratio && $base != - ]]; then
			ratio=$(awk -v a="${val[$name]}" -v b="${val[$base]}" \
				'BEGIN { printf "%.2f", a / b }')
		elif [[ -z $ratio ]]; then
			echo "Error: the benchmark printed no ${name}_$suffix" >&2
			exit 1
		fi
		shown=- result=-
		if [[ $target != - ]]; then
			shown="<=${target}x"
			result=$(awk -v r="$ratio" -v t="$target" \
				'BEGIN { print (r <= t) ? "PASS" : "MISS" }')
		fi
		printf '%-22s %10s %7sx %8s  %s\n' "$name" "${val[$name]}" "$ratio" \
			"$shown" "$result"
	done
	echo
}

# figure            target on its ratio to the floor (-: none)
judge ratio ratio xdp_pass_floor_ns \
	"xdp_pass_floor_ns  -" \
	"xdp_nonsyn_ns      1.3" \
	"xdp_syn_admit_ns   4.0" \
	"xdp_syn_deny_ns    3.0" \
	"xdp_syn_deny_leased_ns 3.0" \
	"xdp_syn_deny_flood_ns -" \
	"xdp_syn_nomatch_ns 2.0" \
	"xdp_nonsyn_caps_ns 1.3" \
	"xdp_fin_ns         -" \
	"xdp_fin_caps_ns    -" \
	"xdp_rst_ns         -" \
	"xdp_syn_retrans_ns -" \
	"xdp_ref_ktime_ns   -" \
	"xdp_ref_cas_ns     -" \
	"xdp_ref_irreducible_ns -" \
	"xdp_verify_syn_ns  -" \
	"xdp_cookie_gen_ns  -" \
	"xdp_verify_ack_charged_ns -" \
	"xdp_verify_ack_open_ns -" \
	"xdp_verify_ack_other_ns -" \
	"xdp_answer_restore_ns -" \
	"xdp_verify_answer_ns -" \
	"xdp_syn_admit_per_source_ns -"

# The SYN figures against the least an admitted SYN can cost
# (xdp_ref_irreducible: parse, classify, coarse clock, one CAS, one slot).
judge /ref ref_ratio - \
	"xdp_syn_admit_ns 1.25" \
	"xdp_syn_deny_ns -" \
	"xdp_syn_deny_leased_ns -" \
	"xdp_syn_deny_flood_ns -" \
	"xdp_syn_nomatch_ns -" \
	"xdp_syn_retrans_ns -"

# A per-source limit against the plain admit path, measured in the same
# rounds (bench_per_source.c).
printf '%-28s %10s %8s\n' figure ns "/admit"
printf '%-28s %10s %7sx\n' xdp_syn_admit_per_source_ns \
	"${val[xdp_syn_admit_per_source_ns]}" \
	"${val[xdp_syn_admit_per_source_ns_admit_ratio]:-?}"
echo

# An admitted SYN with a million prefixes over 100,000 tenants loaded
# (bench_million.c): from sources spread over the whole policy, from one
# source, and the classification alone from the spread sources, each
# against the floor and the plain admit path in the same rounds.
printf '%-36s %10s %8s %8s\n' figure ns ratio /admit
for name in xdp_syn_admit_1m_prefixes_ns xdp_syn_admit_1m_one_source_ns \
	xdp_classify_1m_prefixes_ns xdp_syn_admit_1m_prefixes_v6_ns \
	xdp_syn_admit_1m_one_source_v6_ns xdp_classify_1m_prefixes_v6_ns; do
	if [[ -z ${val[$name]:-} ]]; then
		echo "Error: the benchmark printed no $name" >&2
		exit 1
	fi
	printf '%-36s %10s %7sx %7sx\n' "$name" "${val[$name]}" \
		"${val[${name}_ratio]:-?}" "${val[${name}_admit_ratio]:-?}"
done
printf '%-36s %10s\n' "rule tables (1 KiB each, per half)" \
	"${val[cls_1m_prefixes_tables]:-?}"
printf '%-36s %10s\n' "compile of the million (ms)" \
	"${val[cls_1m_prefixes_compile_ms]:-?}"
echo

# The control plane: a change of one tenant among 4,096 of 64 prefixes,
# against listing the same set (see tools/bench-ctl.sh).
out=$("$(dirname "$0")/bench-ctl.sh" "$build") || exit 1
echo "$out"
echo
unset val
declare -A val
while read -r name value _; do
	[[ -n $name ]] && val[$name]=$value
done <<<"$out"
printf '%-24s %8s %8s\n' figure ms ratio
for name in ctl_tenant_list_ms ctl_tenant_set_ms ctl_tenant_set_match_ms; do
	if [[ -z ${val[$name]:-} ]]; then
		echo "Error: the control benchmark printed no $name" >&2
		exit 1
	fi
	printf '%-24s %8s %7sx\n' "$name" "${val[$name]}" "$(awk -v a="${val[$name]}" \
		-v b="${val[ctl_tenant_list_ms]}" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
done
echo
# The control plane at scale: 100,000 tenants (tools/bench-scale.sh), then
# a fleet of two at scale, a new agent reading 100,000 tenants from the
# store (tools/bench-fleet-sync.sh); each script's lines as they come, then
# the figures against the most each may be.
scale=$(mktemp)
trap 'rm -f "$scale"' EXIT
for script in bench-scale.sh bench-fleet-sync.sh; do
	"$(dirname "$0")/$script" "$build" | tee -a "$scale"
	((PIPESTATUS[0] == 0)) || exit 1
	echo
done
unset val unit
declare -A val unit
while read -r name value u; do
	[[ -n $name ]] || continue
	val[$name]=$value
	unit[$name]=$u
done <"$scale"
# at_most ROW...: each ROW "name most", the figure against the most it may
# be, in its own unit.  Exits 1 when a figure is missing.
at_most() {
	local row name most

	printf '%-33s %12s %12s  %s\n' figure value target result
	for row; do
		read -r name most <<<"$row"
		if [[ -z ${val[$name]:-} ]]; then
			echo "Error: the benchmark printed no $name" >&2
			exit 1
		fi
		printf '%-33s %12s %12s  %s\n' "$name" "${val[$name]} ${unit[$name]}" \
			"<=$most ${unit[$name]}" "$(awk -v v="${val[$name]}" -v m="$most" \
			'BEGIN { print (v <= m) ? "PASS" : "MISS" }')"
	done
	echo
}
at_most \
	"ctl_tenant_set_ms 50" \
	"ctl_tenant_set_rewrite_ms 50" \
	"ctl_apply_100k_s 5" \
	"agent_restart_100k_ms 2000" \
	"fleet_restart_100k_ms 2000" \
	"bytes_per_tenant_kernel 1024" \
	"bytes_per_tenant_agent_own 1024" \
	"bytes_per_tenant_kernel_ports 1024" \
	"bytes_per_tenant_agent_ports 2684" \
	"bytes_per_tenant_agent_own_ports 1024" \
	"agent_rss_100k_ports_mib 256" \
	"fleet_bytes_per_tenant_agent_own 1024" \
	"fleet_sync_100k_s 10" \
	"fleet_change_ms 1000" \
	"ctl_apply_del_90k_s 5" \
	"fleet_apply_del_90k_cpu_s 5" \
	"metrics_scrape_100k_ms 250" \
	"metrics_loop_stall_ms 5"
# The agent's memory is judged on its own (heap and anonymous maps): its
# resident set also holds the kernel's maps it writes through, which
# bytes_per_tenant_kernel counts already.
echo "resident, the kernel's maps it maps included: bytes_per_tenant_agent" \
	"${val[bytes_per_tenant_agent]:-?} bytes, fleet_bytes_per_tenant_agent" \
	"${val[fleet_bytes_per_tenant_agent]:-?} bytes"
echo
"$(dirname "$0")/bench-preload.sh" "$build" || exit 1
echo
"$(dirname "$0")/bench-fleet.sh" "$build" || exit 1
echo
FLEET_BENCH_REDIS=cluster "$(dirname "$0")/bench-fleet.sh" "$build" || exit 1
echo
# N simulated agents against one Redis (tools/bench-sim.sh, docs/scaling.md).
"$(dirname "$0")/bench-sim.sh" "$build" || exit 1
exit 0
