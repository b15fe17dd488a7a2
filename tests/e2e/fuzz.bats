#!/usr/bin/env bats
# fuzz.bats: rlagent against hostile input, bounded in time - a fake Redis
# that misbehaves in one way per agent (errors, wrong types, truncated and
# huge replies, garbage, silence, hostile pub/sub and policies), thousands
# of mutated control requests, mutated policy.json files, and the libFuzzer
# targets of the state parser and of the packet path.  See docs/testing.md to run any of it longer.
#
# One network namespace for the file, a veth pair per agent in it, pins
# under /sys/fs/bpf/<namespace>-*, everything else under BATS_FILE_TMPDIR;
# processes recorded and killed by PID.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers

# Modes of tests/fuzz/fake_redis.c that must leave the agent degraded, and
# the log line that says why.
declare -gA REDIS_WHY=(
	[error]="couldn't run .*fake failure"
	[string]="couldn't use .* reply .*unexpected type"
	[negative]="couldn't use .* reply .*unexpected type"
	[wronglen]="couldn't use .* reply .*unexpected type"
	[nested]="couldn't use .* reply .*unexpected type"
	[truncated]="lost Redis .*command connection"
	[huge]="did not answer within"
	[garbage]="lost Redis .*Protocol error"
	[silent]="did not answer within"
)
# Modes after which the broker may stay healthy: only alive and answering.
# extra and pubsub-short trip assertions inside hiredis itself unless the
# agent's reply guard (user/lib/redis_loop.c) refuses them first.
REDIS_OTHER=(pubsub policy extra pubsub-short)
# Modes of a Redis that is not ready yet (they heal on SIGUSR1), and what
# the agent's status says about each meanwhile.
declare -gA REDIS_HEAL=(
	[loading]="couldn't load rlgate's scripts: LOADING"
	[busy]="couldn't load rlgate's scripts: BUSY"
	[masterdown]="couldn't load rlgate's scripts: MASTERDOWN"
	[stall]="did not answer SCRIPT LOAD within"
)

FUZZ_SECONDS=${RLGATE_FUZZ_SECONDS:-8}
LIBFUZZER_SECONDS=${RLGATE_LIBFUZZER_SECONDS:-6}
STATE_FILES=${RLGATE_FUZZ_STATE_FILES:-12}

# --- plumbing ------------------------------------------------------------------

_pid_add() { echo "$1" >>"$BATS_FILE_TMPDIR/pids"; }

# veth_add I: a veth pair fzI/fyI, both up, in the file's namespace.
veth_add() {
	ip -n "$FZ_NS" link add "fz$1" type veth peer name "fy$1" &&
		ip -n "$FZ_NS" link set "fz$1" up && ip -n "$FZ_NS" link set "fy$1" up
}

# agent_run I DIR [rlagent options]: rlagent on fzI, its files in DIR, in
# the background; DIR/pid holds its PID.  Does not wait.
agent_run() {
	local i=$1 dir=$2

	shift 2
	mkdir -p "$dir"
	nsenter --net="/run/netns/$FZ_NS" "$RLGATE_BUILD/rlagent" --iface "fz$i" \
		--mode skb --metrics "127.0.0.1:$((19400 + i))" \
		--control "$dir/ctl.sock" --state-dir "$dir/state" \
		--pin-dir "/sys/fs/bpf/$FZ_NS-$i" "$@" >>"$dir/agent.log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	_pid_add $!
}

# wait_status DIR: until the agent in DIR answers status (5 s at most).
wait_status() {
	local k

	for ((k = 0; k < 50; k++)); do
		"$RLGATE_BUILD/rlctl" --socket "$1/ctl.sock" status >/dev/null 2>&1 && return 0
		kill -0 "$(<"$1/pid")" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

rlc() {
	local dir=$1

	shift
	timeout 5 "$RLGATE_BUILD/rlctl" --socket "$dir/ctl.sock" "$@"
}

show_log() {
	echo "--- $1/agent.log (last 30 lines) ---"
	tail -n 30 "$1/agent.log"
	if [[ -e $1/redis.log ]]; then
		echo "--- $1/redis.log (last 10) ---"
		tail -n 10 "$1/redis.log"
	fi
	return 0
}

# redis_mode_start MODE I: a fake Redis in MODE and a fleet agent on it;
# once the agent is healthy, a tenant, then the switch to misbehaviour.
redis_mode_start() {
	local mode=$1 i=$2 dir=$BATS_FILE_TMPDIR/redis-$1 k

	mkdir -p "$dir"
	veth_add "$i" || return 1
	"$BATS_FILE_TMPDIR/fake_redis" --unix "$dir/redis.sock" --mode "$mode" \
		--seed "$i" 2>"$dir/redis.log" 3>&- &
	echo $! >"$dir/redis.pid"
	_pid_add $!
	for ((k = 0; k < 50; k++)); do [[ -S $dir/redis.sock ]] && break; sleep 0.05; done
	agent_run "$i" "$dir" --redis "unix:$dir/redis.sock" --agent-id "fz-$mode"
}

redis_mode_trigger() {
	local dir=$BATS_FILE_TMPDIR/redis-$1 k

	wait_status "$dir" || return 1
	for ((k = 0; k < 50; k++)); do
		rlc "$dir" status 2>/dev/null | grep -q 'broker: *healthy' && break
		sleep 0.1
	done
	rlc "$dir" status | grep -q 'broker: *healthy' || {
		echo "$1: never healthy against the fake Redis" >&2; return 1; }
	rlc "$dir" tenant set fz --rate 10/s --match 198.51.100.0/24 --fail deny \
		>/dev/null || return 1
	kill -USR1 "$(<"$dir/redis.pid")"
}

# --- file setup -------------------------------------------------------------------

setup_file() {
	local m i=0 modes

	e2e_require_root || return 0
	e2e_require_build rlagent rlctl || return 1
	cc -O1 -g -Wall -Wextra -Werror -o "$BATS_FILE_TMPDIR/fake_redis" \
		"$RLGATE_ROOT/tests/fuzz/fake_redis.c" || return 1
	cc -O1 -g -Wall -Wextra -Werror -o "$BATS_FILE_TMPDIR/ctl_fuzz" \
		-I"$RLGATE_ROOT/user/lib" "$RLGATE_ROOT/tests/fuzz/ctl_fuzz.c" -ljansson || return 1
	export FZ_NS=rlfz$$
	ip netns add "$FZ_NS" || return 1
	ip -n "$FZ_NS" link set lo up
	: >"$BATS_FILE_TMPDIR/pids"

	# Every fake Redis mode at once: the breaker takes a few heartbeats to
	# open, and the agents wait for that side by side.
	modes=("${!REDIS_WHY[@]}" "${REDIS_OTHER[@]}")
	for m in "${modes[@]}"; do
		i=$((i + 1))
		redis_mode_start "$m" "$i" || return 1
	done
	for m in "${modes[@]}"; do
		redis_mode_trigger "$m" || { show_log "$BATS_FILE_TMPDIR/redis-$m" >&2; return 1; }
	done
	# Not ready from the start: these agents never saw a healthy Redis.
	for m in "${!REDIS_HEAL[@]}"; do
		i=$((i + 1))
		redis_mode_start "$m" "$i" || return 1
	done
	export FZ_NEXT_IFACE=$((i + 1))
}

teardown_file() {
	local pid

	if [[ -s $BATS_FILE_TMPDIR/pids ]]; then
		while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done \
			<"$BATS_FILE_TMPDIR/pids"
		while read -r pid; do wait "$pid" 2>/dev/null || true; done \
			<"$BATS_FILE_TMPDIR/pids"
	fi
	[[ -n ${FZ_NS:-} ]] || return 0
	ip netns del "$FZ_NS" 2>/dev/null || true
	rm -rf "/sys/fs/bpf/$FZ_NS"-* 2>/dev/null || true
	if ls -d "/sys/fs/bpf/$FZ_NS"-* 2>/dev/null; then
		echo "pins left under /sys/fs/bpf (above)" >&2
		return 1
	fi
}

setup() {
	[[ -z ${E2E_SKIP:-} ]] || skip "$E2E_SKIP"
}

# check_degraded MODE: alive, answers status within the timeout, reports
# the broker degraded (waiting up to 8 s for the breaker), logged why.
check_degraded() {
	local mode=$1 dir=$BATS_FILE_TMPDIR/redis-$1 k out

	for ((k = 0; k < 80; k++)); do
		out=$(rlc "$dir" status 2>&1) || break
		grep -q 'broker: *degraded' <<<"$out" && break
		sleep 0.1
	done
	if ! kill -0 "$(<"$dir/pid")" 2>/dev/null; then
		show_log "$dir"
		echo "rlagent died against fake Redis mode $mode"
		return 1
	fi
	out=$(rlc "$dir" status) || { show_log "$dir"; echo "status failed: $out"; return 1; }
	grep -q 'broker: *degraded' <<<"$out" || {
		show_log "$dir"; echo "status after 8 s: $out"; return 1; }
	grep -q "fleet degraded" "$dir/agent.log" &&
		grep -Eq "${REDIS_WHY[$mode]}" "$dir/agent.log" || {
		show_log "$dir"; echo "the log does not say '${REDIS_WHY[$mode]}'"; return 1; }
	# The fail policy is in the kernel: the tenant is still there.
	rlc "$dir" --json tenant list | grep -q '"fz"'
}

# check_alive MODE: alive and answering after 2 s of the misbehaviour.
check_alive() {
	local dir=$BATS_FILE_TMPDIR/redis-$1

	sleep 2
	kill -0 "$(<"$dir/pid")" 2>/dev/null || { show_log "$dir"; echo "rlagent died"; return 1; }
	rlc "$dir" status >/dev/null || { show_log "$dir"; echo "no status"; return 1; }
}

# --- fake Redis --------------------------------------------------------------------

@test "fake Redis answering every command with an error: agent degrades, logs it, keeps serving" {
	check_degraded error
}

@test "fake Redis answering a bulk string where integers are expected: degraded, logged" {
	check_degraded string
}

@test "fake Redis answering negative integers: degraded, logged" {
	check_degraded negative
}

@test "fake Redis answering integer arrays of the wrong length: degraded, logged" {
	check_degraded wronglen
}

@test "fake Redis answering nested arrays: degraded, logged" {
	check_degraded nested
}

@test "fake Redis sending half a reply then closing: degraded, logged, reconnecting" {
	check_degraded truncated
}

@test "fake Redis declaring a 64 MiB bulk string and sending 1 MiB: degraded by timeout" {
	check_degraded huge
}

@test "fake Redis answering garbage bytes: degraded on the protocol error" {
	check_degraded garbage
}

@test "fake Redis that never answers: degraded by timeout" {
	check_degraded silent
}

@test "fake Redis pushing malformed pub/sub messages: agent keeps running" {
	check_alive pubsub
}

@test "fake Redis serving mutated fleet policies: agent keeps running, logs them, its tenants stay valid" {
	local dir=$BATS_FILE_TMPDIR/redis-policy

	check_alive policy
	grep -q "couldn't apply the fleet's policy of 'fz'" "$dir/agent.log" ||
		{ show_log "$dir"; echo "no mutated policy was refused"; return 1; }
	# Whatever the fleet set must read back as a valid tenant.
	rlc "$dir" --json tenant list >"$dir/list.json"
	jq -e 'all(.[]; (.name | test("^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")) and
		(.match | length) >= 1 and .burst >= 1)' "$dir/list.json" >/dev/null ||
		{ cat "$dir/list.json"; return 1; }
}

@test "fake Redis sending an unsolicited extra reply: agent keeps running (hiredis alone would abort)" {
	check_alive extra
}

@test "fake Redis pushing a pub/sub array shorter than a message: agent keeps running (hiredis alone would abort)" {
	check_alive pubsub-short
}

# check_heals MODE: the agent against a Redis that is not ready (MODE) is
# degraded with its connection up (connecting, for a Redis that answers
# nothing), and says why; once Redis is ready it is
# healthy within 5 s on the same connections (the fake logs each one).
check_heals() {
	local mode=$1 dir=$BATS_FILE_TMPDIR/redis-$1 k j t0 conns

	wait_status "$dir" || { show_log "$dir"; echo "no status"; return 1; }
	for ((k = 0; k < 50; k++)); do
		j=$(rlc "$dir" --json status) || break
		[[ $(jq -r .degraded_reason <<<"$j") == *"${REDIS_HEAL[$mode]}"* ]] && break
		sleep 0.1
	done
	echo "before: $(jq -c '{broker, degraded_reason, redis}' <<<"$j")"
	[[ $(jq -r .broker <<<"$j") == degraded ]] || { show_log "$dir"; return 1; }
	# connected once Redis has answered anything (an error too); a Redis
	# that answers nothing is still being connected to
	[[ $(jq -r .redis.state <<<"$j") == "$([[ $mode == stall ]] && echo connecting || echo connected)" ]] ||
		{ show_log "$dir"; return 1; }
	[[ $(jq -r .degraded_reason <<<"$j") == *"${REDIS_HEAL[$mode]}"* ]] ||
		{ show_log "$dir"; echo "the reason does not say '${REDIS_HEAL[$mode]}'"; return 1; }

	kill -USR1 "$(<"$dir/redis.pid")"
	t0=$(date +%s%N)
	for ((k = 0; k < 50; k++)); do
		[[ $(rlc "$dir" --json status | jq -r .broker) == healthy ]] && break
		sleep 0.1
	done
	echo "healthy after $((($(date +%s%N) - t0) / 1000000)) ms"
	[[ $(rlc "$dir" --json status | jq -r .broker) == healthy ]] ||
		{ show_log "$dir"; echo "not healthy 5 s after Redis was ready"; return 1; }
	# the command and the policy connection, each made once
	conns=$(grep -c 'connected$' "$dir/redis.log")
	[[ $conns == 2 ]] || { show_log "$dir"; echo "$conns connections, expected 2"; return 1; }
	if grep -q 'lost Redis' "$dir/agent.log"; then
		show_log "$dir"
		return 1
	fi
	# and it leases: a tenant set now gets its first lease
	rlc "$dir" tenant set fzh --rate 10/s --match 198.51.100.0/24 >/dev/null
	for ((k = 0; k < 50; k++)); do
		[[ $(rlc "$dir" --json stats fzh | jq -r '.[0].leases') -ge 1 ]] && return 0
		sleep 0.1
	done
	show_log "$dir"
	rlc "$dir" --json stats fzh
	return 1
}

@test "Redis loading its dataset (-LOADING) when the agent connects: degraded, scripts retried, healthy within 5 s of Redis being ready, same connection" {
	check_heals loading
}

@test "Redis busy with a long script (-BUSY) when the agent connects: scripts retried, healthy within 5 s once it is free, same connection" {
	check_heals busy
}

@test "replica without its master (-MASTERDOWN) when the agent connects: scripts retried, healthy within 5 s once it answers, same connection" {
	check_heals masterdown
}

@test "Redis frozen (SCRIPT LOAD unanswered) when the agent connects: degraded by timeout, healthy within 5 s once it answers, same connection" {
	check_heals stall
}

# --- control socket ---------------------------------------------------------------

@test "control socket: thousands of mutated requests, agent alive, status within 1 s, policy changed only by valid tenant.set" {
	local i=$FZ_NEXT_IFACE dir=$BATS_FILE_TMPDIR/ctl seed=${RLGATE_FUZZ_SEED:-$RANDOM}

	veth_add "$i"
	agent_run "$i" "$dir"
	wait_status "$dir" || { show_log "$dir"; return 1; }
	rlc "$dir" tenant set base --rate 10/s --match 192.0.2.0/24 >/dev/null
	rlc "$dir" tenant set base6 --rate 5/m --match 2001:db8::/32 --ports 443 >/dev/null
	echo "seed $seed (RLGATE_FUZZ_SEED=$seed to repeat)"
	run "$BATS_FILE_TMPDIR/ctl_fuzz" --socket "$dir/ctl.sock" --pid "$(<"$dir/pid")" \
		--seconds "$FUZZ_SECONDS" --seed "$seed"
	echo "$output"
	((status == 0)) || { show_log "$dir"; return 1; }
	# The baseline tenants are exactly as they were.
	rlc "$dir" tenant get base | grep -q '10/s'
	rlc "$dir" tenant get base6 | grep -q '5/m'
}

# --- state file --------------------------------------------------------------------

@test "state file: agent started on mutated policy.json files loads each or quarantines it, never crashes" {
	local i=$((FZ_NEXT_IFACE + 1)) dir=$BATS_FILE_TMPDIR/state k pid n
	local seed=${RLGATE_FUZZ_SEED:-$RANDOM} loaded=0 damaged=0

	veth_add "$i"
	echo "seed $seed"
	for ((k = 0; k < STATE_FILES; k++)); do
		rm -rf "$dir/state"
		mkdir -p "$dir/state"
		"$BATS_FILE_TMPDIR/ctl_fuzz" --mutate-state "$((seed * 1000 + k))" \
			"$dir/state/policy.json"
		cp "$dir/state/policy.json" "$dir/input-$k.json"
		: >"$dir/agent.log"
		agent_run "$i" "$dir"
		pid=$(<"$dir/pid")
		if ! wait_status "$dir"; then
			echo "file $k ($dir/input-$k.json): agent did not come up"
			show_log "$dir"
			return 1
		fi
		if grep -q "couldn't read policy" "$dir/agent.log"; then
			damaged=$((damaged + 1))
			n=$(find "$dir/state" -name 'policy.json.bad.*' | wc -l)
			if ((n != 1)) || ! cmp -s "$dir/input-$k.json" "$dir"/state/policy.json.bad.*; then
				echo "file $k: reported damaged but not quarantined intact"
				ls -l "$dir/state"; show_log "$dir"; return 1
			fi
			rlc "$dir" status >/dev/null
		else
			loaded=$((loaded + 1))
			n=$(jq '.tenants | length' "$dir/input-$k.json")
			[[ $(rlc "$dir" --json tenant list | jq length) == "$n" ]] || {
				echo "file $k loaded but the tenant count is not $n"
				show_log "$dir"; return 1; }
		fi
		kill -TERM "$pid"
		for ((n = 0; n < 50; n++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	echo "$loaded loaded, $damaged quarantined"
	((damaged > 0))
}

# libfuzzer_available: skips the calling test unless clang links
# -fsanitize=fuzzer.
libfuzzer_available() {
	echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
		>"$BATS_FILE_TMPDIR/probe.c"
	clang -fsanitize=fuzzer "$BATS_FILE_TMPDIR/probe.c" -o "$BATS_FILE_TMPDIR/probe" \
		2>/dev/null || skip "clang with -fsanitize=fuzzer is not available"
}

@test "state file: libFuzzer on the policy parser, bounded, no crash and a lossless round trip" {
	local corpus=$BATS_FILE_TMPDIR/corpus

	libfuzzer_available
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-D_GNU_SOURCE -I"$RLGATE_ROOT/bpf" -I"$RLGATE_ROOT/user/lib" \
		-I"$RLGATE_ROOT/user/agent" "$RLGATE_ROOT/tests/fuzz/fuzz_state.c" \
		"$RLGATE_ROOT"/user/lib/policy*.c "$RLGATE_ROOT/user/lib/pfxstore.c" \
		"$RLGATE_ROOT/user/lib/hot.c" "$RLGATE_ROOT/user/lib/state.c" \
		"$RLGATE_ROOT/user/lib/statelines.c" "$RLGATE_ROOT/user/lib/namehash.c" \
		"$RLGATE_ROOT/user/lib/parse.c" "$RLGATE_ROOT/user/lib/ctl_proto.c" \
		"$RLGATE_ROOT/user/lib/log.c" "$RLGATE_ROOT/user/lib/opts.c" -ljansson -lbpf \
		-o "$BATS_FILE_TMPDIR/fuzz_state"
	mkdir -p "$corpus"
	run "$BATS_FILE_TMPDIR/fuzz_state" -max_total_time="$LIBFUZZER_SECONDS" \
		-dict="$RLGATE_ROOT/tests/fuzz/state.dict" -artifact_prefix="$BATS_FILE_TMPDIR/" \
		"$corpus" "$RLGATE_ROOT/tests/fuzz/corpus/state"
	echo "$output" | tail -n 30
	((status == 0))
}

# --- the preload pool ----------------------------------------------------------------

@test "preload pool: libFuzzer on every reader the agent has of the pool (heal, split, ledger, stats, status, watch), bounded, no crash, no SIGBUS, and a damaged pool made anew with the agent's layout" {
	libfuzzer_available
	e2e_require_build librl.a
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-D_GNU_SOURCE -I"$RLGATE_ROOT/bpf" -I"$RLGATE_ROOT/user/lib" \
		-I"$RLGATE_ROOT/user/agent" "$RLGATE_ROOT/tests/fuzz/fuzz_pool.c" \
		"$RLGATE_ROOT/user/agent/preload.c" "$RLGATE_ROOT/user/lib/pool.c" \
		"$RLGATE_ROOT/user/lib/pool_write.c" "$RLGATE_ROOT/user/lib/ledger.c" \
		"$RLGATE_ROOT/user/lib/slot.c" "$RLGATE_BUILD/librl.a" \
		-ljansson -lbpf -lelf -lz -lm -o "$BATS_FILE_TMPDIR/fuzz_pool"
	mkdir -p "$BATS_FILE_TMPDIR/pool-corpus"
	run "$BATS_FILE_TMPDIR/fuzz_pool" -max_total_time="$LIBFUZZER_SECONDS" \
		-artifact_prefix="$BATS_FILE_TMPDIR/" "$BATS_FILE_TMPDIR/pool-corpus" \
		"$RLGATE_ROOT/tests/fuzz/corpus/pool"
	echo "$output" | grep -v '^ *#[0-9]' | tail -n 40
	((status == 0))
}

# --- packet path -------------------------------------------------------------------

@test "packet path: libFuzzer on xdp_rlgate, bounded, every frame keeps the verdict rules of the independent reference" {
	local corpus=$BATS_FILE_TMPDIR/xdp-corpus t=$RLGATE_ROOT/tests/bpf

	libfuzzer_available
	e2e_require_build rlgate.skel.h librl.a
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-D_GNU_SOURCE -I"$RLGATE_BUILD" -I"$RLGATE_ROOT/bpf" -I"$RLGATE_ROOT/user/lib" \
		-I"$t" "$RLGATE_ROOT/tests/fuzz/fuzz_xdp.c" "$t/pktfuzz.c" "$t/pktref.c" \
		"$t/harness.c" "$t/pkt.c" "$RLGATE_BUILD/librl.a" -lbpf -lelf -lz -ljansson -lm \
		-o "$BATS_FILE_TMPDIR/fuzz_xdp"
	mkdir -p "$corpus"
	# The checked-in corpus first (every regression frame), then mutations.
	run "$BATS_FILE_TMPDIR/fuzz_xdp" -max_len=1500 -max_total_time="$LIBFUZZER_SECONDS" \
		-artifact_prefix="$BATS_FILE_TMPDIR/" "$corpus" "$RLGATE_ROOT/tests/fuzz/corpus/xdp"
	# the broken rule and the frame, without the stack trace
	echo "$output" | grep -v '^ *#[0-9]' | tail -n 40
	((status == 0))
}
