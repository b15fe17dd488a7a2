# Helpers shared by the control-plane benchmarks (bench-ctl.sh,
# bench-scale.sh): sourced, never run.

die() {
	echo "Error: $*" >&2
	exit 1
}

# ms CMD...: the wall time of CMD in milliseconds; fails with CMD.
ms() {
	local t0 t1

	t0=$(date +%s%N)
	"$@" >/dev/null || return 1
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

# median N...: the middle value.
median() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# wait_agent PID LOG: waits up to 60 s for the agent's control socket (rl
# status) to answer; dies with its log when it exits or never answers.
wait_agent() {
	local pid=$1 log=$2 n

	for ((n = 0; n < 6000; n++)); do
		rl status >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "rlagent exited"; }
		sleep 0.01
	done
	cat "$log" >&2
	die "rlagent does not answer"
}

# bench_lab NAME WHAT: checks the build ($build) and the tools, then makes
# $work, a lab of one server ($lab-s1, no clients) and the pin folder $pin,
# all removed at exit with the agent whose PID is in $agent.  WHAT says in
# an error which benchmark needs root.
bench_lab() {
	local f c

	[[ $(id -u) -eq 0 ]] || die "the $2 benchmark builds a network namespace and attaches XDP; run it as root"
	for f in rlagent rlctl pass.bpf.o; do
		[[ -e $build/$f ]] || die "$build/$f not found; build it with 'make'"
	done
	for c in jq nsenter bpftool; do
		command -v "$c" >/dev/null || die "$c not found; run tools/deps.sh"
	done
	export RLGATE_BUILD=$build
	lab=$1$$
	work=$(mktemp -d "/tmp/rlgate-bench-$2.XXXXXX") || die "couldn't make a work directory"
	pin=/sys/fs/bpf/rlgate-$lab
	agent=
	trap bench_cleanup EXIT
	trap 'exit 1' INT TERM
	"$root/tools/lab.sh" up "$lab" --servers 1 --clients 0 >"$work/lab.log" 2>&1 ||
		{ cat "$work/lab.log" >&2; die "couldn't build the lab"; }
}

bench_cleanup() {
	[[ -n $agent ]] && kill -KILL "$agent" 2>/dev/null
	"$root/tools/lab.sh" down "$lab" >/dev/null 2>&1
	rm -rf "$pin" "$work"
}

rl() {
	"$build/rlctl" --socket "$work/sock" "$@"
}

# fleet_cleanup: the exit trap of a three-server lab benchmark: kills the
# processes in $pids, removes the lab $lab, its servers' pins and $work.
fleet_cleanup() {
	local p i

	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null
	done
	"$root/tools/lab.sh" down "$lab" >/dev/null 2>&1
	for i in 1 2 3; do
		rm -rf "/sys/fs/bpf/rlgate-$lab-s$i"
	done
	rm -rf "$work"
}

# fleet_agents_up REDIS_ADDR: rlagent in fleet mode on servers s1..s3 of
# $lab, agent ids s1..s3, each with the folder $work/sI (control socket
# `sock`, state, log) and pins under /sys/fs/bpf/rlgate-$lab-sI; their PIDs
# are added to $pids.  Returns once every agent sees 3 live agents (asked
# through the caller's `rl I ...`); dies with the log of one that does not.
fleet_agents_up() {
	local i n

	for i in 1 2 3; do
		mkdir -p "$work/s$i/state"
		# nsenter, not `ip netns exec`: the latter hides /sys/fs/bpf
		nsenter --net="/run/netns/$lab-s$i" "$build/rlagent" --iface eth0 \
			--redis "$1" --agent-id "s$i" --control "$work/s$i/sock" \
			--state-dir "$work/s$i/state" --pin-dir "/sys/fs/bpf/rlgate-$lab-s$i" \
			--metrics 127.0.0.1:9464 >"$work/s$i/agent.log" 2>&1 &
		pids+=($!)
		disown $!
	done
	for i in 1 2 3; do
		for ((n = 0; n < 100; n++)); do
			[[ $(rl "$i" --json status 2>/dev/null | jq -r .live_agents) == 3 ]] && break
			sleep 0.1
		done
		((n < 100)) || { cat "$work/s$i/agent.log" >&2; die "rlagent on s$i did not see 3 live agents"; }
	done
}

# redis_up PORT [redis-server options]: one redis-server on the lab's Redis
# host ($lab-redis at $redis_ip), its PID added to the array pids (the
# caller kills them at exit); returns once it answers.
redis_up() {
	local port=$1 n

	shift
	ip netns exec "$lab-redis" redis-server --bind "$redis_ip" --port "$port" \
		--save '' --appendonly no --protected-mode no --daemonize no "$@" \
		>"$work/redis-$port.log" 2>&1 &
	pids+=($!)
	disown $!	# killed by PID at exit; no job notices
	for ((n = 0; n < 100; n++)); do
		[[ $(ip netns exec "$lab-redis" redis-cli -h "$redis_ip" -p "$port" PING 2>/dev/null) == PONG ]] &&
			return 0
		sleep 0.05
	done
	cat "$work/redis-$port.log" >&2
	die "redis-server does not answer on port $port"
}
