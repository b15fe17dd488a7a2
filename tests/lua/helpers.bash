# Shared setup for the Lua script tests: a private redis-server per test file
# (unix socket in a temp dir, no persistence), the scripts loaded into it, and
# small wrappers.  Sourced by every tests/lua/*.bats.

TOP=${RLGATE_TOP:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
U=3600000000	# bucket units per token (see docs/redis.md)

# redis_spawn ARGS...: redis-server on $RSOCK with ARGS, daemonized;
# returns once it answers, 1 if it exited first or stayed silent for 5 s.
redis_spawn() {
	local i pid

	rm -f "$RDIR/redis.pid"
	redis-server --port 0 --unixsocket "$RSOCK" --unixsocketperm 700 \
		--save '' --appendonly no --dir "$RDIR" \
		--pidfile "$RDIR/redis.pid" --logfile "$RDIR/redis.log" \
		"$@" --daemonize yes >/dev/null || return 1
	for ((i = 0; i < 100; i++)); do
		[[ -S $RSOCK && -s $RDIR/redis.pid ]] &&
			redis-cli -s "$RSOCK" PING 2>/dev/null | grep -q PONG && return 0
		# (no pid file yet is not a failure: set -e in setup_file)
		pid=$(cat "$RDIR/redis.pid" 2>/dev/null || true)
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.05
	done
	return 1
}

# free_port: a TCP port nothing listens on now (a bind may still lose the
# race to another process: the caller tries again).
free_port() {
	local p

	while :; do
		p=$(shuf -i 20000-59999 -n 1)
		[[ -z $(ss -Htln "sport = :$p") ]] && echo "$p" && return 0
	done
}

# Starts redis-server in a fresh temp dir and loads every lua/*.lua; the SHA
# of lua/x.lua is exported as SHA_x.  Called from setup_file.  With
# "cluster": a Redis Cluster of this one node serving every slot, which
# refuses, as any cluster does, a call whose keys are in different slots.
# Its cluster bus needs a TCP port even without a client port: a free one
# on 127.0.0.1 (the default, 10000 next to port 0, is one every other such
# node on the host wants too).
redis_start() {
	local mode=${1:-} n
	export RDIR
	RDIR=$(mktemp -d "${BATS_RUN_TMPDIR:-/tmp}/rlredis.XXXXXX")
	export RSOCK=$RDIR/redis.sock
	if [[ $mode == cluster ]]; then
		for ((n = 0; n < 5; n++)); do
			redis_spawn --cluster-enabled yes --cluster-config-file "$RDIR/nodes.conf" \
				--bind 127.0.0.1 --cluster-port "$(free_port)" && break
		done
	else
		redis_spawn
	fi
	local i
	redis-cli -s "$RSOCK" PING | grep -q PONG || {
		echo "redis-server did not start:" >&2
		cat "$RDIR/redis.log" >&2
		return 1
	}
	if [[ $mode == cluster ]]; then
		redis-cli -s "$RSOCK" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null || return 1
		for ((i = 0; i < 100; i++)); do
			redis-cli -s "$RSOCK" CLUSTER INFO | grep -q '^cluster_state:ok' &&
				break
			sleep 0.05
		done
		redis-cli -s "$RSOCK" CLUSTER INFO | grep -q '^cluster_state:ok' || {
			echo "the one-node cluster did not come up" >&2
			return 1
		}
	fi
	local f name sha
	for f in "$TOP"/lua/*.lua; do
		name=$(basename "$f" .lua)
		sha=$(redis-cli -s "$RSOCK" SCRIPT LOAD "$(cat "$f")") || return 1
		[[ $sha =~ ^[0-9a-f]{40}$ ]] || {
			echo "SCRIPT LOAD $f: $sha" >&2
			return 1
		}
		export "SHA_$name=$sha"
	done
}

# Stops the redis-server started by redis_start, by its PID only.  Called
# from teardown_file, which bats runs even when tests failed.
redis_stop() {
	[[ -n ${RDIR:-} ]] || return 0
	local pid
	pid=$(cat "$RDIR/redis.pid" 2>/dev/null)
	if [[ -n $pid ]] && kill "$pid" 2>/dev/null; then
		local i
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -rf "$RDIR"
}

r() { redis-cli -s "$RSOCK" "$@"; }

# Redis's clock in microseconds.
redis_now_us() {
	local t
	t=($(r TIME))
	echo $((t[0] * 1000000 + 10#${t[1]}))
}

# expiry_within WHAT AT MS T0 T1: AT (Redis ms, a PEXPIRETIME or a score) is
# MS milliseconds after a call made between Redis times T0 and T1
# (redis_now_us): between T0 + MS and T1 + MS, however long the calls
# around it took.
expiry_within() {
	local lo=$(($4 / 1000 + $3)) hi=$(($5 / 1000 + $3))

	(($2 >= lo && $2 <= hi)) ||
		{ echo "$1 expires at $2 ms, expected $lo to $hi ($3 ms after the call)"; return 1; }
}

# expires_in KEY MS T0 T1: a call made between Redis times T0 and T1 set KEY
# to expire MS milliseconds after it (a TTL long enough that KEY is still
# there to be read; for a short one, see atomically).
expires_in() {
	expiry_within "$1" "$(r PEXPIRETIME "$1")" "$2" "$3" "$4"
}

# atomically CMD...: runs the commands (one redis-cli line each), then TIME,
# in one MULTI/EXEC, and prints their replies one line each, the last line
# Redis's time after them in microseconds.  No key expires in the middle of
# a transaction (Redis holds its clock for expiry there), so the expiry of a
# key given a short TTL by one command can be read by the next however long
# the machine stalls in between.
atomically() {
	local out

	mapfile -t out < <({ echo MULTI; printf '%s\n' "$@"; echo TIME; echo EXEC; } | r)
	# MULTI's OK and a QUEUED per command come first
	out=("${out[@]:$# + 2}")
	((${#out[@]} >= 2)) || { echo "MULTI/EXEC of $*: no replies" >&2; return 1; }
	printf '%s\n' "${out[@]:0:${#out[@]} - 2}"
	echo $((out[-2] * 1000000 + 10#${out[-1]}))
}

# live_until WHAT SCORE T1: a check that something expiring at SCORE (Redis
# ms: a holder's or an agent's) was still live at a call made before Redis
# time T1 (us) can tell only if T1 came before SCORE; returns 2 and says so
# when the machine stalled so long that it did not (see retry_stalled).
live_until() {
	(($3 / 1000 < $2)) && return 0
	echo "# $1 expired at $2 ms, before the call that had to find it live ended ($(($3 / 1000)) ms): the machine stalled"
	return 2
}

# sleep_ms MS: sleeps MS milliseconds at least.
sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

# retry_stalled FN MS: runs FN MS, a check that something given a TTL of MS
# ms is still live at a later call.  FN returns 2 when it cannot tell
# (live_until): a stalled machine let the TTL run out before that call.
# Then FN runs again with twice the TTL, up to 5 times in all; otherwise its
# status is returned.  FN starts from a clean state each time.
retry_stalled() {
	local fn=$1 ms=$2 try rc

	for ((try = 0; try < 5; try++)); do
		rc=0
		"$fn" "$ms" || rc=$?
		((rc == 2)) || return "$rc"
		ms=$((ms * 2))
	done
	echo "stalled 5 times: the machine never kept a TTL of up to $((ms / 2)) ms"
	return 1
}

# lease KEY COUNT PERIOD BURST WANT CHUNK -> "granted remaining wait_ms"
lease() {
	local key=$1
	shift
	r EVALSHA "$SHA_lease" 1 "$key" "$@" | paste -sd' '
}

# refund KEY COUNT PERIOD BURST N -> new whole token count
refund() {
	local key=$1
	shift
	r EVALSHA "$SHA_refund" 1 "$key" "$@"
}

# field KEY NAME -> the hash field's value
field() { r HGET "$1" "$2"; }

# Unique key per test, so tests in one file do not share buckets.
bucket() { echo "rl:{t:test$BATS_TEST_NUMBER${1:-}}:bucket"; }

# Exact reference model of the refill, in 64-bit shell arithmetic written
# independently of the script, for any elapsed time: an elapsed time that
# fills the bucket is found by division first, so that elapsed*k is only
# formed below (burst - tokens) * U + k, far from 2^63.
# refill_model TOKENS FRAC ELAPSED_US K BURST -> "tokens frac"
refill_model() {
	local t=$1 f=$2 e=$3 k=$4 b=$5 units
	((e < 0)) && e=0
	# the microseconds until full: ceil(((b - t) * U - f) / k)
	if ((t >= b || e >= (((b - t) * U - f) + k - 1) / k)); then
		echo "$b 0"
		return
	fi
	units=$((f + e * k))
	t=$((t + units / U))
	f=$((units % U))
	((t >= b)) && { t=$b; f=0; }
	echo "$t $f"
}

# ms_model N FRAC K -> ceil((N*U - FRAC) / (1000*K)), for N*U below 2^63
ms_model() {
	local x=$(($1 * U - $2)) d=$((1000 * $3))
	echo $(((x + d - 1) / d))
}
