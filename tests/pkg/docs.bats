#!/usr/bin/env bats
# The operator's guide can be navigated and linked: docs/operations.md has a
# table of contents listing every ## and ### heading with the anchor GitHub
# gives it, no two headings share an anchor, and every `operations.md,
# "TITLE"` that the README, the docs, the alert rules, the unit, the
# package's scripts or the sources point an operator to is a heading of it
# (tests/pkg/doc_refs.py).  docs/architecture.md's source map names every
# user/**/*.c, every function of the BPF program an entry point reaches and
# every map, and nothing the tree no longer has (tools/srcmap.py).  The
# plots have an opaque background, and the flood's CPU plot draws what the
# table judges.  Every link between the README and the docs names a file of
# the tree and, with an anchor, a heading of it (tests/pkg/doc_links.py).

load helpers

@test "operations.md: a table of contents of every heading, and every reference to it names a heading" {
	run python3 "$TOP/tests/pkg/doc_refs.py" "$TOP"
	echo "$output"
	[[ $status -eq 0 && -z $output ]]
}

@test "the plots in docs/bench and those make bench-peers draws have an opaque white background (readable on a dark theme)" {
	local f n=0

	for f in "$TOP"/docs/bench/*.svg; do
		n=$((n + 1))
		grep -qE '^<rect x="0" y="0" width="[0-9]+" height="[0-9]+" fill="#ffffff"/>$' "$f" ||
			{ echo "$f: no white background" >&2; return 1; }
	done
	((n > 0)) || { echo "no plot in docs/bench" >&2; return 1; }
	# every terminal the benchmark sets draws one
	[[ $(grep -c '^set terminal svg' "$TOP/tools/bench-peers.sh") -eq \
		$(grep -c '^set terminal svg .* background rgb "white"$' "$TOP/tools/bench-peers.sh") ]] ||
		{ echo "a plot of tools/bench-peers.sh without a background" >&2; return 1; }
}

@test "the flood's CPU plot (tools/bench-peers.sh --plot-cpu) draws every contender's cpu_server in both forms and the target the table holds rlgate to; docs/bench has it" {
	# figs, not lines: bats' run sets lines
	local figs=$BATS_TEST_TMPDIR/figures svg=$BATS_TEST_TMPDIR/cpu.svg

	command -v gnuplot >/dev/null || skip "no gnuplot"
	cat >"$figs" <<EOF
peers_flood_none_cpu_s_per_msyn 2.828 s
peers_flood_nft_cpu_s_per_msyn 0.733 s
peers_flood_hashlimit_cpu_s_per_msyn 0.836 s
peers_flood_rlgate_cpu_s_per_msyn 0.267 s
peers_flood_floor_cpu_s_per_msyn 0.171 s
peers_flood_xdp_none_cpu_s_per_msyn 2.621 s
peers_flood_xdp_nft_cpu_s_per_msyn 0.652 s
peers_flood_xdp_hashlimit_cpu_s_per_msyn 0.632 s
peers_flood_xdp_rlgate_cpu_s_per_msyn 0.087 s
peers_flood_xdp_floor_cpu_s_per_msyn 0.058 s
EOF
	run "$TOP/tools/bench-peers.sh" --plot-cpu "$figs" "$svg"
	echo "$output"
	[[ $status -eq 0 && -s $svg ]]
	# the best netfilter on XDP frames (hashlimit here) / 5, as the table's bound
	grep -qF "rlgate's target 0.126" "$svg" || { echo "no target 0.126 in the title" >&2; return 1; }
	[[ $("$TOP/tools/bench-peers.sh" --table "$figs" | grep -F 'XDP frames' | grep -F 'CPU per M SYNs' | awk '{ print $(NF - 1) }') == 0.126 ]] ||
		{ echo "the table's bound is not the plot's" >&2; return 1; }
	[[ $(cat "${svg%.svg}.dat") == "$(printf '%s\n' 'none 2.828 2.621' 'nft 0.733 0.652' \
		'hashlimit 0.836 0.632' 'rlgate 0.267 0.087' 'floor 0.171 0.058')" ]] ||
		{ echo "plotted: $(cat "${svg%.svg}.dat")" >&2; return 1; }
	# without the netfilter figures on XDP frames there is no target to draw
	grep -v xdp_nft "$figs" | grep -v xdp_hashlimit >"$figs.2"
	run "$TOP/tools/bench-peers.sh" --plot-cpu "$figs.2" "$svg"
	[[ $status -eq 1 ]]
	[[ -s $TOP/docs/bench/peers-flood-cpu.svg ]]
}

@test "architecture.md's source map names every user/**/*.c, every BPF function an entry point reaches, every map, and nothing gone" {
	run python3 "$TOP/tools/srcmap.py" "$TOP"
	echo "$output"
	[[ $status -eq 0 && -z $output ]]
}

@test "the source map's check names exactly what a tree adds or drops: files, functions reached (not those merely defined or named in a comment), maps and globals" {
	local t=$BATS_TEST_TMPDIR/tree f want

	mkdir -p "$t/docs"
	cp -r "$TOP/bpf" "$t/bpf"
	while IFS= read -r f; do
		mkdir -p "$t/$(dirname "$f")"
		: >"$t/$f"
	done < <(cd "$TOP" && find user -name '*.[ch]')
	rm "$t/user/lib/wake.c"
	: >"$t/user/lib/newfile.c"
	cat >>"$t/bpf/rlgate.bpf.c" <<'EOF'
__u32 new_global;
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} new_map SEC(".maps");
static int orphan(void) { return 1; }
static __always_inline int probe_new(void) { /* orphan() */ return new_global; }
SEC("xdp")
int xdp_probe(struct xdp_md *ctx) { return probe_new() ? XDP_PASS : XDP_DROP; }
EOF
	grep -v -e '^| `take_failed` |' -e '^| `src_top` |' \
		"$TOP/docs/architecture.md" >"$t/docs/architecture.md"

	run python3 "$TOP/tools/srcmap.py" "$t"
	want="missing from the source map: file user/lib/newfile.c
not in the tree: file user/lib/wake.c
missing from the source map: function probe_new
missing from the source map: function take_failed
missing from the source map: function xdp_probe
missing from the source map: map new_global
missing from the source map: map new_map
missing from the source map: map src_top"
	[[ $status -eq 1 && $output == "$want" ]] ||
		{ echo "status $status, output:" >&2; echo "$output" >&2; return 1; }
}

@test "every link between the README and the docs names a file of the tree and, with an anchor, a heading of that page" {
	run python3 "$TOP/tests/pkg/doc_links.py" "$TOP"
	echo "$output"
	[[ $status -eq 0 && -z $output ]]
}

@test "the link check names each broken link, and only those: a missing page, a missing heading, a missing anchor on the same page" {
	local t=$BATS_TEST_TMPDIR/tree

	mkdir -p "$t/docs/bench"
	: >"$t/docs/bench/plot.svg"
	printf '%s\n' '# Tree' '[ok](docs/a.md#the-one-heading) [ok](docs/a.md#the-one-heading-1)' \
		'[ok](https://example.org/x.md) [ok](#tree) `[code](nofile.md)`' >"$t/README.md"
	printf '%s\n' '# The one heading' '## The one heading' '![p](bench/plot.svg)' \
		'[a](b.md#nothing) [b](nofile.md) [c](#nowhere) [d](../README.md#tree)' \
		'```' '[fenced](nofile.md)' '```' >"$t/docs/a.md"
	printf '%s\n' '# B' >"$t/docs/b.md"
	run python3 "$TOP/tests/pkg/doc_links.py" "$t"
	[[ $status -eq 1 && $output == "docs/a.md:4: b.md#nothing (no such heading)
docs/a.md:4: nofile.md (no such file)
docs/a.md:4: #nowhere (no such heading)" ]] ||
		{ echo "status $status, output:" >&2; echo "$output" >&2; return 1; }
}
