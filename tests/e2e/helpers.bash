# helpers.bash: what every rlgate end-to-end suite shares - a netns lab per
# test or per file (torn down even when a test fails), commands inside its
# hosts, an accept-and-close server, loadgen runs read back as JSON.
#
# Use from a suite with `load helpers` (suites live next to this file).
# lab_up picks the scope by where it is called: in setup_file the lab lives
# for the whole file, in a test or setup it lives for that test.  The default
# setup/teardown/teardown_file below skip tests when not root and remove the
# labs; a suite that defines its own must call e2e_setup / e2e_teardown /
# e2e_teardown_file from it.
# Output appears only for failing tests (bats keeps it otherwise).

RLGATE_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
RLGATE_BUILD=${RLGATE_BUILD:-$RLGATE_ROOT/build}
# Tests cd around and ip netns exec keeps the cwd: make it absolute.
[[ $RLGATE_BUILD == /* ]] || RLGATE_BUILD=$PWD/$RLGATE_BUILD
export RLGATE_BUILD
LAB_SH=$RLGATE_ROOT/tools/lab.sh
LOADGEN=$RLGATE_BUILD/loadgen

# --- preconditions ----------------------------------------------------------------

# Skips the calling test when not root.  bats 1.8 (Debian 12) cannot skip
# from setup_file, so there it records the reason and returns 1, and the
# default setup (or e2e_setup) skips every test; write in setup_file:
#     e2e_require_root || return 0
e2e_require_root() {
	[[ $(id -u) -eq 0 ]] && return 0
	if [[ -z ${BATS_TEST_TMPDIR:-} ]]; then
		export E2E_SKIP="needs root: network namespaces, XDP"
		return 1
	fi
	skip "needs root: network namespaces, XDP"
}

# Fails (not skips) when a build product is missing: a suite that quietly
# passes on an unbuilt tree tests nothing.
e2e_require_build() {
	local f

	for f in "$@"; do
		if [[ ! -e $RLGATE_BUILD/$f ]]; then
			echo "missing $RLGATE_BUILD/$f: run 'make' first (or set RLGATE_BUILD)" >&2
			return 1
		fi
	done
}

# --- labs ---------------------------------------------------------------------------

# One file per lab created: tests of a file may run in parallel (bats --jobs),
# and a file per entry needs no locking.
_lab_registry() {
	local dir=${BATS_FILE_TMPDIR:?helpers.bash needs bats >= 1.4}/labs
	mkdir -p "$dir"
	echo "$dir"
}

_lab_scope() {
	if [[ -n ${BATS_TEST_TMPDIR:-} ]]; then echo test; else echo file; fi
}

# lab_up [tools/lab.sh up options]: builds a lab with a name unique to this
# process and sets LAB (exported, so a lab made in setup_file is seen by the
# tests).  Names are short on purpose: rl + pid + a letter.
lab_up() {
	local reg seq name out letters=abcdefghijklmnopqrstuvwxyz

	e2e_require_root || return 1
	reg=$(_lab_registry)
	for ((seq = ${_lab_seq:-0}; seq < 26; seq++)); do
		name=rl${BASHPID}${letters:seq:1}
		# a lab left by a crashed run with a recycled pid: take the next
		ip netns list | awk '{ print $1 }' | grep -qE "^$name-" || break
	done
	((seq < 26)) || { echo "lab_up: no free lab name for pid $BASHPID" >&2; return 1; }
	_lab_seq=$((seq + 1))
	: >"$reg/$(_lab_scope).$name"
	if ! out=$("$LAB_SH" up "$name" "$@" 2>&1); then
		echo "lab_up $*: tools/lab.sh up $name failed:" >&2
		echo "$out" >&2
		return 1
	fi
	export LAB=$name
}

# lab_down [NAME]: removes a lab (default: $LAB) now rather than at teardown.
lab_down() {
	local name=${1:-${LAB:?no lab}} out rc=0

	out=$("$LAB_SH" down "$name" 2>&1) || rc=$?
	rm -f "$(_lab_registry)"/*."$name"
	if ((rc)); then
		echo "$out" >&2
		return "$rc"
	fi
}

# Removes the labs of one scope (test or file) or, with "all", every lab this
# file made.  Never fails: teardown must run to the end.
_lab_teardown() {
	local reg entry

	reg=$(_lab_registry)
	for entry in "$reg"/*; do
		[[ -e $entry ]] || continue
		entry=${entry##*/}
		[[ $1 == all || $entry == "$1".* ]] || continue
		lab_down "${entry#*.}" || true
	done
}

e2e_setup() {
	[[ -z ${E2E_SKIP:-} ]] || skip "$E2E_SKIP"
}
e2e_teardown() { _lab_teardown test; }
e2e_teardown_file() { _lab_teardown all; }

setup() { e2e_setup; }
teardown() { e2e_teardown; }
teardown_file() { e2e_teardown_file; }

# lab_ns HOST: the namespace of HOST (s1, c2, redis, sw) in $LAB.
lab_ns() {
	echo "${LAB:?no lab: call lab_up first}-$1"
}

# in_ns HOST CMD...: runs CMD inside HOST of $LAB.
in_ns() {
	local ns

	ns=$(lab_ns "$1")
	shift
	ip netns exec "$ns" "$@"
}

# lab_addr HOST [4|6]: HOST's address (default IPv4), read from the lab.
lab_addr() {
	local fam=${2:-4} scope=()

	[[ $fam == 6 ]] && scope=(scope global)
	ip -n "$(lab_ns "$1")" -o "-$fam" addr show dev eth0 "${scope[@]}" |
		awk '{ sub("/.*", "", $4); print $4; exit }'
}

# lab_target HOST PORT [4|6]: a loadgen TARGET for HOST, e.g. 192.0.2.11:8080
# or [2001:db8:1::a:1]:8080.
lab_target() {
	local a

	a=$(lab_addr "$1" "${3:-4}")
	[[ -n $a ]] || { echo "lab_target: no IPv${3:-4} address on $1" >&2; return 1; }
	if [[ ${3:-4} == 6 ]]; then echo "[$a]:$2"; else echo "$a:$2"; fi
}

# --- servers ------------------------------------------------------------------------

# serve_start HOST PORT [loadgen options]: an accept-and-close server on
# HOST's IPv4 and IPv6 address; returns once both listen.  Sets SERVE_PID and
# SERVE_OUT (its JSON report appears there when it stops).  It dies with the
# lab at the latest.
serve_start() {
	local host=$1 port=$2 dir i t4 t6

	shift 2
	dir=${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR}
	SERVE_OUT=$dir/serve-$host-$port.json
	t4=$(lab_target "$host" "$port" 4) && t6=$(lab_target "$host" "$port" 6) || return 1
	# A plain command, not a function, so that $! is loadgen itself (ip
	# netns exec execs it).  fd 3 closed: bats waits for every holder.
	ip netns exec "$(lab_ns "$host")" "$LOADGEN" --json --serve "$t4" --serve "$t6" "$@" \
		>"$SERVE_OUT" 2>"$SERVE_OUT.log" 3>&- &
	SERVE_PID=$!
	for ((i = 0; i < 100; i++)); do
		[[ $(grep -c 'listening on' "$SERVE_OUT.log" 2>/dev/null) == 2 ]] && return 0
		if ! kill -0 "$SERVE_PID" 2>/dev/null; then
			echo "serve_start $host $port: server exited:" >&2
			cat "$SERVE_OUT.log" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "serve_start $host $port: not listening after 5 s:" >&2
	cat "$SERVE_OUT.log" >&2
	return 1
}

# wait_line FILE PATTERN WHAT: waits up to 5 s for a line matching PATTERN
# in FILE (a server's log saying it listens); fails showing FILE otherwise.
wait_line() {
	local i

	for ((i = 0; i < 100; i++)); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "$3 does not listen:" >&2
	cat "$1" >&2
	return 1
}

# serve_stop [PID [OUT]]: stops a server (default: the last started) and
# prints how many connections it accepted.
serve_stop() {
	local pid=${1:-$SERVE_PID} out=${2:-$SERVE_OUT} i

	kill -TERM "$pid" 2>/dev/null || true
	# not necessarily our child (setup_file may have started it): poll
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	jq -er .accepted "$out" || {
		echo "serve_stop: no report from server $pid:" >&2
		cat "$out" "$out.log" >&2
		return 1
	}
}

# --- load ----------------------------------------------------------------------------

# run_loadgen_json HOST ARGS...: runs loadgen --json ARGS in HOST and leaves
# the report in LOADGEN_JSON.  Call it directly, not through bats' `run` (a
# subshell would lose LOADGEN_JSON).  Fails with loadgen's stderr shown.
run_loadgen_json() {
	local host=$1 err rc=0

	shift
	err=$(mktemp "${BATS_TEST_TMPDIR:-${BATS_FILE_TMPDIR:-/tmp}}/loadgen.XXXXXX")
	LOADGEN_JSON=$(in_ns "$host" "$LOADGEN" --json "$@" 2>"$err") || rc=$?
	if ((rc)) || ! jq -e . >/dev/null 2>&1 <<<"$LOADGEN_JSON"; then
		echo "loadgen in $host failed (exit $rc): loadgen $*" >&2
		cat "$err" >&2
		echo "stdout: $LOADGEN_JSON" >&2
		rm -f "$err"
		return 1
	fi
	rm -f "$err"
	echo "loadgen $* -> $LOADGEN_JSON"
}

# json_get FILTER [JSON]: a jq FILTER applied to JSON (default: the last
# loadgen report), raw output.  Fails when the result is null or missing.
json_get() {
	local v

	if ! v=$(jq -r "$1" <<<"${2-$LOADGEN_JSON}") || [[ $v == null ]]; then
		echo "json_get: '$1' gives nothing in: ${2-$LOADGEN_JSON}" >&2
		return 1
	fi
	echo "$v"
}

# --- checks --------------------------------------------------------------------------
# Each says what it compared, so a failure reads without the source at hand.

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
	[[ $2 == "$3" ]] && return 0
	echo "$1: got '$2', expected '$3'" >&2
	return 1
}

# expect_gone WHAT PATH: PATH is removed within 5 s (what the agent does
# right after it answers).
expect_gone() {
	local i

	for ((i = 0; i < 100; i++)); do
		[[ -e $2 ]] || return 0
		sleep 0.05
	done
	echo "$1: '$2' still there after 5 s ($(wc -c <"$2") bytes)" >&2
	return 1
}

# is_number VALUE: whether VALUE is a decimal number (an integer or a
# fraction, with a sign and an exponent maybe): not empty, null, nan, inf or
# a number followed by anything.
is_number() {
	[[ $1 =~ ^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]
}

# expect_between WHAT ACTUAL LOW HIGH (numbers, inclusive).  An ACTUAL that
# is not a number (a read that failed: empty, null, nan) fails the check
# whatever the bounds, as does a bound that is not one.
expect_between() {
	local v

	for v in "$2" "$3" "$4"; do
		is_number "$v" && continue
		echo "$1: got '$2', expected between '$3' and '$4' ('$v' is not a number)" >&2
		return 1
	done
	awk -v a="$2" -v l="$3" -v h="$4" 'BEGIN { exit !(a + 0 >= l + 0 && a + 0 <= h + 0) }' &&
		return 0
	echo "$1: got $2, expected between $3 and $4" >&2
	return 1
}

# expect_offered N [JSON]: the load generator issued N attempts, less what a
# machine that kept it behind for a whole timeout after the duration made it
# give up (at most 1%, reported as `skipped`; a sender merely late at the end
# catches up): the offered load is what the test meant.
expect_offered() {
	local attempts skipped

	attempts=$(json_get .total.attempts "${2-$LOADGEN_JSON}") || return 1
	skipped=$(json_get .skipped "${2-$LOADGEN_JSON}") || return 1
	expect_eq "attempts + skipped" $((attempts + skipped)) "$1" &&
		expect_between "attempts skipped by a loaded machine" "$skipped" 0 $(($1 / 100))
}

# expect_near WHAT ACTUAL EXPECTED PERCENT (a value that is not a number
# fails, as in expect_between)
expect_near() {
	local lo hi

	is_number "$3" || { echo "$1: expected value '$3' is not a number" >&2; return 1; }

	lo=$(awk -v e="$3" -v p="$4" 'BEGIN { print e * (1 - p / 100) }')
	hi=$(awk -v e="$3" -v p="$4" 'BEGIN { print e * (1 + p / 100) }')
	expect_between "$1 (within $4% of $3)" "$2" "$lo" "$hi"
}
