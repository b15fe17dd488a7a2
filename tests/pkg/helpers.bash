# helpers.bash: what the pkg suite's files share - where the tree and the
# build are, and a scratch directory per test.
# shellcheck disable=SC2034 # TOP and BUILD are for the suites

TOP=${RLGATE_TOP:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
BUILD=${RLGATE_BUILD:-$TOP/build}

# man_text PAGE: the man page PAGE (e.g. rlctl.8) of the build as plain
# ASCII text, one paragraph per line, no hyphenation.
man_text() {
	LC_ALL=C MANWIDTH=1000 man --nh --nj -l "$BUILD/man/$1" 2>/dev/null
}

# help_options TEXT: every option that a --help TEXT lists, one per line, as
# "-x, --long" when it has a short form, else "--long".
help_options() {
	grep -oE '(^|[ [|])(-[A-Za-z], )?--[a-z][a-z0-9-]*' <<<"$1" |
		sed -E 's/^[ [|]//' | sort -u
}

# help_commands TEXT: the commands of a --help TEXT's "Commands:" section:
# the leading lowercase words of each entry ("tenant set", "apply").
help_commands() {
	awk '/^Commands:/ { on = 1; next }
	     on && /^[^ ]/ { on = 0 }
	     on && /^  [a-z]/ {
		sub(/^  /, ""); sub(/  .*/, "")
		n = split($0, w, " "); c = ""
		for (i = 1; i <= n && w[i] ~ /^[a-z]+$/; i++) c = c (c ? " " : "") w[i]
		print c
	     }' <<<"$1"
}

# option_facts HELP: "OPTION VALUE" for each bound, value and default that
# HELP states in an option's closing parentheses: "(2 to 1024, default 16)"
# gives 2, 1024 and 16; "(auto, native or tc; default auto)" each value.
option_facts() {
	awk '
	function flush(   g, n, i, w, parts) {
		if (opt == "" || !match(text, /\([^()]*\)$/))
			return
		g = substr(text, RSTART + 1, RLENGTH - 2)
		if (g !~ /^([0-9.]+ to [0-9]|above [0-9]|default [^ :]+$)/ &&
		    g !~ /^[a-z]+(, [a-z]+)* or [a-z]+(; default [a-z]+)?$/)
			return
		gsub(/default:.*/, "", g)
		n = split(g, parts, /[ ,;]+/)
		for (i = 1; i <= n; i++) {
			w = parts[i]
			if (w == "" || w ~ /^(to|or|default|above|at|most)$/)
				continue
			print opt, w
		}
	}
	/^  (-[A-Za-z],|   ) --[a-z]/ {
		flush()
		match($0, /--[a-z][a-z0-9-]*/)
		opt = substr($0, RSTART, RLENGTH)
		text = $0
		sub(/^ *(-[A-Za-z], )?--[a-z][a-z0-9-]*( [^ ]+)? +/, "", text)
		next
	}
	/^      +[^ ]/ && opt != "" { t = $0; sub(/^ +/, "", t); text = text " " t; next }
	{ flush(); opt = ""; text = "" }
	END { flush() }
	' <<<"$1"
}
