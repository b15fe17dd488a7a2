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
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
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

# expires_in KEY MS T0 T1: a call made between Redis times T0 and T1
# (redis_now_us) set KEY to expire MS milliseconds after it: its expiry lies
# between T0 + MS and T1 + MS, however long the calls around it took.
expires_in() {
	local at lo=$(($3 / 1000 + $2)) hi=$(($4 / 1000 + $2))

	at=$(r PEXPIRETIME "$1")
	((at >= lo && at <= hi)) ||
		{ echo "$1 expires at $at ms, expected $lo to $hi ($2 ms after the call)"; return 1; }
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
