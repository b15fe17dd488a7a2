#!/usr/bin/env bats
# The operator's guide can be navigated and linked: docs/operations.md has a
# table of contents listing every ## and ### heading with the anchor GitHub
# gives it, no two headings share an anchor, and every `operations.md,
# "TITLE"` that the README, the docs, the alert rules, the unit, the
# package's scripts or the sources point an operator to is a heading of it
# (tests/pkg/doc_refs.py).

load helpers

@test "operations.md: a table of contents of every heading, and every reference to it names a heading" {
	run python3 "$TOP/tests/pkg/doc_refs.py" "$TOP"
	echo "$output"
	[[ $status -eq 0 && -z $output ]]
}
