#!/usr/bin/env bats
# Upgrading rlgate in place: the pins, program and state file that a real
# build of each earlier map layout left are taken over by this build's
# rlagent under load, without a moment in which SYNs pass unlimited; pins of
# a newer layout are refused and left enforcing.
#
# An earlier layout's build is a fixture: the tree at that layout's last
# commit (LAYOUT_COMMIT below; bpf/rlgate.h: RL_ABI_VERSION), taken from git
# history with `git archive` and built with its own Makefile.  Nothing of it
# is checked in: a copy of the old kernel program and agent would be a second
# source nobody maintains, while the history already holds exactly what was
# released, and its own agent pins its maps and writes its state file just as
# an operator's old installation did.  Skipped outside a git checkout with
# that history (a release tarball, a shallow clone).  A layout bump adds the
# last commit of the layout it replaces, and a test for it.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers
load conncap_helpers

# The last commit of each earlier layout.
declare -gA LAYOUT_COMMIT=(
	[1]=1b56ba46cb3f342d711a755980cc9550984f81bf
	[2]=0d9d462f464c2630ac43f607ca65826093155e7b
	[3]=350412992cae475a5111619fb9ca81edf771da99
	[4]=b972e1924f32d4c4550094c7ccd987804329220e
)
# This build's layout.
LAYOUT=$(awk '$2 == "RL_ABI_VERSION" { print $3 }' "$RLGATE_ROOT/bpf/rlgate.h")

setup() { agent_setup; }
# The sampler and the load, when a test stopped before it waited for them;
# the fleet test's Redis.
teardown() {
	local pid

	for pid in ${SAMPLER_PID:-} ${LOAD_PID:-}; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	agent_teardown
	if [[ -n ${REDIS_PID:-} ]]; then
		proc_stop "$REDIS_PID" KILL || true
	fi
}

# The fleet test's Redis: a redis-server of its own on s1's loopback.
REDIS_PORT=6390

# redis_local_start: that redis-server, empty and not saving; REDIS_PID.
redis_local_start() {
	local n

	in_ns s1 redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
		--appendonly no >"$BATS_TEST_TMPDIR/redis.log" 2>&1 3>&- &
	REDIS_PID=$!
	for ((n = 0; n < 100; n++)); do
		[[ $(redis_local PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.05
	done
	echo "redis-server on s1 does not answer:" >&2
	cat "$BATS_TEST_TMPDIR/redis.log" >&2
	return 1
}

# redis_local ARGS...: redis-cli to it.
redis_local() {
	in_ns s1 redis-cli -p "$REDIS_PORT" "$@"
}

# old_build N: rlagent and rlctl of layout N's last tree; OLD_BUILD is their
# folder.  Built once per commit under $RLGATE_BUILD/fixtures (a commit's
# tree never changes; `make clean` removes them) and taken from there by
# every later test and run; a tree without its "built" mark (a build that
# failed or was stopped) is built again from scratch.
old_build() {
	local commit=${LAYOUT_COMMIT[$1]} src

	git -C "$RLGATE_ROOT" rev-parse --git-dir >/dev/null 2>&1 ||
		skip "not a git checkout: the layout-$1 fixture is built from git history"
	git -C "$RLGATE_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null ||
		skip "commit $commit (map layout $1) is not in this clone's history"
	src=$RLGATE_BUILD/fixtures/layout$1-$commit
	if [[ ! -e $src/built ]]; then
		rm -rf "$src"
		mkdir -p "$src"
		git -C "$RLGATE_ROOT" archive "$commit" | tar -x -C "$src" || return 1
		env -u CFLAGS -u LDFLAGS -u SANITIZE make -s -C "$src" -j2 BUILD=build \
			build/rlagent build/rlctl >"$src.log" 2>&1 ||
			{ echo "couldn't build the layout-$1 fixture:" >&2; tail -n 30 "$src.log" >&2; return 1; }
		: >"$src/built"
	fi
	OLD_BUILD=$src/build
}

# xdp_prog_id: the id of the XDP program on s1's eth0, or "none".
xdp_prog_id() {
	ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].xdp.prog.id // "none"'
}

# abi_version: the layout version recorded in the pinned `abi` map (struct
# rl_abi: the magic, then the version; its low byte is enough here), or
# "none" for pins without it (layout 1).
abi_version() {
	local b

	[[ -e $PIN_DIR/abi ]] || { echo none; return 0; }
	b=$(bpftool -j map lookup pinned "$PIN_DIR/abi" key 0 0 0 0 | jq -r '.value[4]') || return 1
	echo $((b))
}

# tenant_of SOCKET RLCTL: the tenant "up" as the agent on SOCKET lists it,
# the fields every layout's build has.
tenant_of() {
	"$2" --socket "$1" --json tenant list |
		jq -cS '.[] | select(.name == "up") | {id, name, rate, burst, match, ports, action}'
}

# upgrade_under_load N [ARG...]: layout N's own build enforces and pins
# (its tenant "up" set with ARGs too), then this build's agent takes over
# under load.  The old program enforces until the new one replaces it,
# tenants, buckets and counters carry over, the limit holds, and no SYN
# passes unjudged.  With UPGRADE_FLEET set, both agents lease from a Redis
# of the test's own: the old one hands its tokens back as it stops and the
# kernel runs on the tenant's fail policy (static: the share of the one
# live agent) until the new one leases on from the same bucket; from then
# on no SYN meets the fail policy, and over the whole load the fleet's
# limit holds within its overshoot bound.
upgrade_under_load() {
	local from=$1 out=$BATS_TEST_TMPDIR/load.json ids=$BATS_TEST_TMPDIR/prog-ids
	local old_id new_id tenant_before admitted_before syn_before
	local attempts connected accepted admitted denied syn t d to bound=0 opts=() n deg

	old_build "$from"
	if [[ -n ${UPGRADE_FLEET:-} ]]; then
		redis_local_start
		opts=(--redis "127.0.0.1:$REDIS_PORT" --agent-id s1)
	fi
	RLGATE_BUILD=$OLD_BUILD agent_start "${opts[@]}"
	"$OLD_BUILD/rlctl" --socket "$CTL" tenant set up --rate 20/s --burst 40 \
		--match "$(prefixes c1)" --action rst "${@:2}"
	if ((from == 1)); then
		expect_eq "layout the fixture recorded" "$(abi_version)" none
		expect_eq "entries of the fixture's counters" \
			"$(bpftool -j map show pinned "$PIN_DIR/counters" | jq .max_entries)" 5
	else
		expect_eq "layout the fixture recorded" "$(abi_version)" "$from"
	fi
	tenant_before=$(tenant_of "$CTL" "$OLD_BUILD/rlctl")
	old_id=$(xdp_prog_id)

	# Which program is on eth0, every 20 ms, from before the old agent
	# stops until after the new one runs.
	while :; do xdp_prog_id; sleep 0.02; done >"$ids" 2>&1 &
	SAMPLER_PID=$!

	# 150/s for 8 s against 20/s with a burst of 40: the bucket is empty
	# from the first second on, so a bucket that did not carry over would
	# admit up to 40 more.
	loadgen_bg c1 "$out" --rate 150 --duration 8 "$(lab_target s1 "$PORT" 4)"
	LOAD_PID=$LOADGEN_BG_PID
	sleep 2
	admitted_before=$(RLGATE_BUILD=$OLD_BUILD stat_get up admitted)
	syn_before=$(metric_value rlgate_syn_total "$(metrics s1)")
	agent_stop TERM
	expect_eq "exit status of the layout-$from agent" "$AGENT_RC" 0
	# no agent: the old program alone, on its own pins
	sleep 1.5
	expect_eq "program on eth0 with no agent running" "$(xdp_prog_id)" "$old_id"

	agent_start "${opts[@]}"
	new_id=$(xdp_prog_id)
	[[ $new_id != "$old_id" && $new_id != none ]] ||
		{ echo "the new agent did not replace program $old_id (now: $new_id)" >&2; return 1; }
	if ((from == 1)); then
		grep -q "migrated pinned map '$PIN_DIR/counters' from layout 1 (5 entries)" "$AGENT_LOG" ||
			{ echo "the agent did not migrate counters" >&2; return 1; }
	fi
	if ((from == 3)); then
		grep -q "'$PIN_DIR/conns' was made anew for map layout $LAYOUT" "$AGENT_LOG" ||
			{ echo "the agent did not make conns anew" >&2; return 1; }
	fi
	# the classifier of layouts before 5 (port rows of another shape)
	if ((from < 5)); then
		grep -q "'$PIN_DIR/cls' was made anew for map layout $LAYOUT" "$AGENT_LOG" ||
			{ echo "the agent did not make cls anew" >&2; return 1; }
	fi
	grep -q 'adopted pinned' "$AGENT_LOG" ||
		{ echo "the agent did not adopt the pins" >&2; return 1; }
	expect_eq "layout recorded after the upgrade" "$(abi_version)" "$LAYOUT"
	if [[ -n ${UPGRADE_FLEET:-} ]]; then
		for ((n = 0; n < 200; n++)); do
			[[ $(rl --json status | jq -r .broker) == healthy ]] && break
			sleep 0.05
		done
		expect_eq "broker of the new agent" "$(rl --json status | jq -r .broker)" healthy
		# its first leases in
		sleep 0.5
		deg=$(stat_get up degraded)
	fi
	expect_eq "tenant after the upgrade" "$(tenant_of "$CTL" "$RLGATE_BUILD/rlctl")" "$tenant_before"

	loadgen_wait "$LOAD_PID" "$out"
	LOAD_PID=
	sleep 0.2
	kill "$SAMPLER_PID" 2>/dev/null
	wait "$SAMPLER_PID" 2>/dev/null || true
	SAMPLER_PID=

	# eth0 always had a program: the old one, then the new one
	expect_eq "programs seen on eth0 through the upgrade" \
		"$(uniq "$ids" | tr '\n' ' ')" "$old_id $new_id "

	attempts=$(json_get .total.attempts)
	connected=$(json_get .total.connected)
	expect_offered 1200
	# rate x time + burst: at most over the load's elapsed time and its
	# connect timeout (a loaded machine stretches the load), at least 95%
	# of it over the load's nominal 8 s
	[[ -n ${UPGRADE_FLEET:-} ]] && bound=$(stat_get up overshoot_bound)
	t=$(json_get .elapsed_s) d=$(json_get .duration_s) to=$(json_get .timeout_ms)
	expect_between "connected across the upgrade (20/s x $t s + 40, bound $bound)" "$connected" \
		"$(awk -v d="$d" 'BEGIN { print 0.95 * (20 * d + 40) }')" \
		"$(awk -v t="$t" -v to="$to" -v b="$bound" 'BEGIN { print 20 * (t + to / 1000) + 40 + b }')"
	accepted=$(serve_stop)
	expect_eq "connections the server accepted" "$accepted" "$connected"

	# Every SYN was judged, by one program or the other, into the one
	# tenant_stats map both share: what it counts is what was offered.
	admitted=$(stat_get up admitted)
	denied=$(stat_get up denied)
	expect_between "stats admitted (continued from $admitted_before)" "$admitted" \
		$((connected - 2)) $((connected + 2))
	expect_between "stats admitted + denied (every SYN judged)" $((admitted + denied)) \
		$((attempts - 2)) $((attempts + 2))
	# the global counters went on from the old ones (the copy keeps what
	# the old program counted up to it)
	syn=$(metric_value rlgate_syn_total "$(metrics s1)")
	expect_between "rlgate_syn_total after the upgrade" "$syn" "$syn_before" "$attempts"
	[[ -n ${UPGRADE_FLEET:-} ]] || return 0

	expect_eq "mode after the upgrade" "$(rl --json status | jq -r .mode)" fleet
	expect_eq "broker after the upgrade" "$(rl --json status | jq -r .broker)" healthy
	expect_eq "SYNs decided by the fail policy once the new agent leased" \
		"$(stat_get up degraded)" "$deg"
	expect_eq "the tenant's rate in Redis" \
		"$(redis_local HGET 'rl:{t:up}:policy' json | jq -r .rate)" 20/s
	expect_eq "the bucket in Redis" "$(redis_local EXISTS 'rl:{t:up}:bucket')" 1
}

@test "pins, program and policy of layout 1's own build are upgraded in place under load (counters migrated): the old program enforces until the new one replaces it, tenants, buckets and counters carry over, the limit holds, no SYN passes unjudged" {
	upgrade_under_load 1
}

@test "pins, program and policy of layout 2's own build are upgraded in place under load: the old program enforces until the new one replaces it, tenants, buckets and counters carry over, the limit holds, no SYN passes unjudged" {
	upgrade_under_load 2
}

@test "pins, program and policy of layout 3's own build are upgraded in place under load (conns made anew, the counts restarted): the old program enforces until the new one replaces it, tenants, buckets and counters carry over, the limit holds, no SYN passes unjudged" {
	upgrade_under_load 3
}

@test "pins, program and policy of layout 4's own build, a tenant by prefix and port, are upgraded in place under load (the classifier made anew, its port rows packed): the old program enforces until the new one replaces it, tenants, buckets and counters carry over, the limit holds, no SYN passes unjudged" {
	upgrade_under_load 4 --port "$PORT"
}

@test "fleet mode: the pins and program of the newest earlier layout's build, leasing from Redis, are upgraded in place under load: no gap, the fail policy only until the new agent leases, the fleet's limit holds" {
	UPGRADE_FLEET=1 upgrade_under_load $((LAYOUT - 1))
}

@test "a capped tenant of layout 3 with connections in flight is upgraded with its count restarted at zero (those connections are no longer counted), and its cap and an instance limit hold from there" {
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	old_build 3
	nginx_start s1
	RLGATE_BUILD=$OLD_BUILD agent_start
	"$OLD_BUILD/rlctl" --socket "$CTL" tenant set capped --rate 1000/s \
		--match "$(prefixes c1)" --action rst --max-conns 5
	client_start c c1 s1 4
	client_do c open 3
	expect_eq "connected under layout 3" "$(jq .connected <<<"$REPLY")" 3
	expect_eq "in flight under layout 3" "$(RLGATE_BUILD=$OLD_BUILD stat_get capped conns)" 3
	agent_stop TERM
	agent_start
	grep -q "counts of 1 capped tenant(s) restart at zero" "$AGENT_LOG" ||
		{ echo "the agent did not restart the capped tenant's count" >&2; return 1; }
	expect_eq "in flight after the upgrade" "$(stat_get capped conns)" 0
	# the 3 open across the upgrade are not counted: 5 more fit
	client_do c open 6
	expect_eq "connected after the upgrade" "$(jq .connected <<<"$REPLY")" 5
	expect_eq "in flight" "$(stat_get capped conns)" 5
	rl instance set --max-conns 6
	client_do c close 8
	for ((i = 0; i < 20; i++)); do
		[[ $(stat_get capped conns) == 0 ]] && break
		sleep 0.1
	done
	expect_eq "in flight after closing them all" "$(stat_get capped conns)" 0
	client_start u c2 s1 4
	client_do u open 8
	expect_eq "connected under the instance cap" "$(jq .connected <<<"$REPLY")" 6
	client_do c quit
	client_do u quit
}

@test "every earlier layout has a fixture commit" {
	for ((n = 1; n < LAYOUT; n++)); do
		[[ -n ${LAYOUT_COMMIT[$n]:-} ]] ||
			{ echo "no LAYOUT_COMMIT for layout $n (this build: layout $LAYOUT)" >&2; return 1; }
	done
}

@test "pins of a newer map layout are refused with a message; the program there keeps enforcing" {
	agent_start
	rl tenant set n --rate 1/h --burst 1 --match "$(prefixes c1)" --action rst
	agent_stop TERM
	# layout 99, magic "rlga"
	bpftool map update pinned "$PIN_DIR/abi" key 0 0 0 0 \
		value 0x72 0x6c 0x67 0x61 99 0 0 0
	run agent_exec --iface eth0 --control "$CTL" --state-dir "$STATE_DIR" \
		--pin-dir "$PIN_DIR"
	expect_eq "exit status" "$status" 1
	[[ $output == *"made by a newer rlgate (map layout 99; this build knows up to $LAYOUT)"* ]] ||
		{ echo "unexpected message: $output" >&2; return 1; }
	xdp_attached || { echo "the program was detached" >&2; return 1; }
	run_loadgen_json c1 --rate 20 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_eq "connected while no agent runs (burst 1)" "$(json_get .total.connected)" 1
}
