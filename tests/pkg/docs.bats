#!/usr/bin/env bats
# The operator's guide can be navigated and linked: docs/operations.md has a
# table of contents listing every ## and ### heading with the anchor GitHub
# gives it, no two headings share an anchor, and every `operations.md,
# "TITLE"` that the README, the docs, the alert rules, the unit, the
# package's scripts or the sources point an operator to is a heading of it
# (tests/pkg/doc_refs.py).  The plots have an opaque background.

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
