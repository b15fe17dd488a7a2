#!/usr/bin/env bats
# The man pages against the built programs: every option and every command
# that a program's --help lists (read from the binaries now, so that an
# option added later without its man page fails here) is in its man page.

load helpers

# entry TERM MAN: MAN (plain text) has an entry for TERM: a line that starts
# with it (an option's or a command's own paragraph, not a mention).
entry() {
	grep -qE -- "^ *$1( |,|\$)" <<<"$2"
}

# missing HELP MAN: the options of HELP that MAN lacks an entry for.
missing() {
	local opt
	while IFS= read -r opt; do
		[[ -n $opt ]] || continue
		if [[ $opt == --* ]]; then
			entry "(-[A-Za-z], )?$opt" "$2" || echo "$opt"
		else
			entry "$opt" "$2" || echo "$opt"
		fi
	done < <(help_options "$1")
}

# unstated HELP MAN: "OPTION VALUE" for each bound, value and default that
# HELP gives an option (option_facts) and MAN's entry for it does not state.
unstated() {
	local opt val para
	while read -r opt val; do
		para=$(grep -E -A1 -- "^ *(-[A-Za-z], )?$opt( |,|\$)" <<<"$2")
		grep -qwF -- "$val" <<<"$para" || echo "$opt $val"
	done < <(option_facts "$1")
}

@test "man pages are built for rlagent and rlctl" {
	for p in rlagent.8 rlctl.8; do
		[[ -s $BUILD/man/$p ]]
		run man_text "$p"
		[[ $status -eq 0 ]]
		[[ ${lines[0]} == *"${p%.8}(8)"* ]]
		[[ $output == *NAME* && $output == *SYNOPSIS* && $output == *OPTIONS* ]]
	done
}

@test "every option of rlagent --help is in rlagent(8)" {
	help=$("$BUILD/rlagent" --help)
	man=$(man_text rlagent.8)
	[[ $(help_options "$help" | wc -l) -ge 20 ]]
	run missing "$help" "$man"
	echo "missing from rlagent(8): $output"
	[[ -z $output ]]
}

@test "every command and option of rlctl --help and its commands' --help is in rlctl(8)" {
	help=$("$BUILD/rlctl" --help)
	man=$(man_text rlctl.8)
	mapfile -t cmds < <(help_commands "$help")
	[[ ${#cmds[@]} -ge 10 ]]
	gaps=()
	for c in "${cmds[@]}"; do
		entry "$c" "$man" || gaps+=("command '$c'")
		# shellcheck disable=SC2086 # a command is one or two words
		chelp=$("$BUILD/rlctl" $c --help)
		[[ -n $chelp ]] || gaps+=("no --help for '$c'")
		while IFS= read -r o; do
			[[ -n $o ]] && gaps+=("option '$o' of '$c'")
		done < <(missing "$chelp" "$man")
	done
	while IFS= read -r o; do
		[[ -n $o ]] && gaps+=("option '$o'")
	done < <(missing "$help" "$man")
	printf 'missing from rlctl(8): %s\n' "${gaps[@]}"
	((${#gaps[@]} == 0))
}

@test "every range, value and default the options' help gives is in the man pages" {
	gaps=()
	help=$("$BUILD/rlagent" --help)
	[[ $(option_facts "$help" | wc -l) -ge 20 ]]
	while IFS= read -r g; do
		[[ -n $g ]] && gaps+=("rlagent $g")
	done < <(unstated "$help" "$(man_text rlagent.8)")
	man=$(man_text rlctl.8)
	mapfile -t cmds < <(help_commands "$("$BUILD/rlctl" --help)")
	for c in "${cmds[@]}"; do
		# shellcheck disable=SC2086 # a command is one or two words
		while IFS= read -r g; do
			[[ -n $g ]] && gaps+=("rlctl $c $g")
		done < <(unstated "$("$BUILD/rlctl" $c --help)" "$man")
	done
	printf 'not in the man page: %s\n' "${gaps[@]}"
	((${#gaps[@]} == 0))
}
