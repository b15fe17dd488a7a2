#!/usr/bin/env bats
# rlctl's bash completion: commands, options and values, and what it asks
# the agent for (through a stand-in rlctl here; tests/e2e/prometheus.bats
# completes against real agents).

load helpers

setup() {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	# A stand-in rlctl: records its arguments, answers as the agent would.
	cat >"$BATS_TEST_TMPDIR/bin/rlctl" <<-'STUB'
	#!/bin/bash
	echo "$*" >>"${0%/*}/calls"
	case "$*" in
	*"tenant list") echo '[{"name": "web", "rate": "1/s"}, {"name": "api-2", "rate": "5/s"}]' ;;
	*status) echo '{"version": "0.1.0", "interfaces": [{"name": "eth3", "attach": "native"}]}' ;;
	*) exit 1 ;;
	esac
	STUB
	chmod +x "$BATS_TEST_TMPDIR/bin/rlctl"
	PATH=$BATS_TEST_TMPDIR/bin:$PATH
	# shellcheck source=/dev/null
	source "$TOP/contrib/bash-completion/rlctl"
}

# complete WORD...: the completions of the command line "rlctl WORD...",
# the last word being completed; sorted, on one line.
complete_line() {
	COMP_WORDS=(rlctl "$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	_rlctl
	printf '%s\n' "${COMPREPLY[@]}" | sort | xargs
}

@test "commands, subcommands and global options" {
	[[ $(complete_line "") == "apply detach instance stats status tenant top version" ]]
	[[ $(complete_line st) == "stats status" ]]
	[[ $(complete_line tenant "") == "del get list set" ]]
	[[ $(complete_line instance "") == "del get set" ]]
	[[ $(complete_line instance set --) == "--help --json --max-conns --rate --socket --timeout" ]]
	[[ $(complete_line --) == "--help --json --socket --timeout --version" ]]
	[[ $(complete_line --timeout "") == "" ]]
	[[ $(complete_line --timeout 30 tenant "") == "del get list set" ]]
	[[ $(complete_line --json tenant "") == "del get list set" ]]
}

@test "a command's options and their values" {
	run complete_line tenant set web --
	[[ $output == *--rate* && $output == *--match* && $output == *--overshoot* &&
	   $output == *--fail* && $output == *--shadow* && $output == *--enforce* &&
	   $output == *--shards* ]]
	[[ $(complete_line tenant set web --action "") == "drop rst" ]]
	[[ $(complete_line tenant set web --fail "") == "allow deny static" ]]
	[[ $(complete_line tenant set web --port "") == "any" ]]
	[[ $(complete_line tenant set web --rate "") == "" ]]
	[[ $(complete_line tenant set web --shards "") == "" ]]
	[[ $(complete_line top --) == "--help --interval --iterations --json --name --socket --timeout --top --wide" ]]
	[[ $(complete_line apply --d) == "--dry-run" ]]
}

@test "every option of each command's --help is offered (the help is made from rlctl's option tables)" {
	[[ -x $BUILD/rlctl ]]
	mapfile -t cmds < <(help_commands "$("$BUILD/rlctl" --help)")
	[[ ${#cmds[@]} -ge 10 ]]
	gaps=()
	for c in "${cmds[@]}"; do
		# shellcheck disable=SC2086 # a command is one or two words
		offered=" $(complete_line $c --) "
		# shellcheck disable=SC2086
		while IFS= read -r o; do
			o=${o##*, }
			[[ $offered == *" $o "* ]] || gaps+=("$o of '$c'")
		done < <(help_options "$("$BUILD/rlctl" $c --help)")
	done
	printf 'not offered: %s\n' "${gaps[@]}"
	((${#gaps[@]} == 0))
}

@test "an option's values, as its --help lists them, are completed" {
	mapfile -t cmds < <(help_commands "$("$BUILD/rlctl" --help)")
	gaps=()
	n=0
	for c in "${cmds[@]}"; do
		# shellcheck disable=SC2086 # a command is one or two words
		while read -r opt val; do
			[[ $val == [a-z]* ]] || continue
			n=$((n + 1))
			# shellcheck disable=SC2086
			[[ " $(complete_line $c "$opt" "") " == *" $val "* ]] ||
				gaps+=("$c $opt $val")
		done < <(option_facts "$("$BUILD/rlctl" $c --help)")
	done
	((n >= 5))
	printf 'not completed: %s\n' "${gaps[@]}"
	((${#gaps[@]} == 0))
}

@test "tenant names and interfaces come from the agent, through the socket given" {
	[[ $(complete_line tenant get "") == "api-2 web" ]]
	[[ $(complete_line tenant del w) == "web" ]]
	[[ $(complete_line stats "") == "api-2 web" ]]
	[[ $(complete_line tenant list --after "") == "api-2 web" ]]
	[[ $(complete_line stats --after a) == "api-2" ]]
	[[ $(complete_line stats --top 3 "") == "api-2 web" ]]
	[[ $(complete_line tenant set "") == "api-2 web" ]]
	[[ $(complete_line tenant set web --rate 5/s "") == "" ]]
	[[ $(complete_line --socket /tmp/x.sock detach "") == "eth3" ]]
	grep -qx -- '--socket /tmp/x.sock --json status' "$BATS_TEST_TMPDIR/bin/calls"
	[[ $(complete_line tenant get web "") == "" ]]
}

@test "detach offers the host's interfaces when no agent answers" {
	printf '#!/bin/sh\nexit 1\n' >"$BATS_TEST_TMPDIR/bin/rlctl"
	run complete_line detach ""
	[[ " $output " == *" lo "* ]]
	[[ $(complete_line tenant get "") == "" ]]
}
