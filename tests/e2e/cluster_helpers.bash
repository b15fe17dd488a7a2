# cluster_helpers.bash: the fleet lab of fleet_helpers.bash on a Redis
# Cluster instead of one Redis - six redis-server nodes on the Redis host
# (ports 7001-7006, three masters with a replica each, made by redis-cli
# --cluster create), the agents started with --redis cluster:SEEDS, which
# master serves a tenant, masters killed and promoted, and cleanup of every
# node by PID.
#
# Use from a suite with `load helpers`, `load agent_helpers`,
# `load fleet_helpers`, then `load cluster_helpers`, and
#     setup_file()    { cluster_setup_file; }
#     teardown_file() { cluster_teardown_file; }
#     setup()         { fleet_setup; }
#     teardown()      { fleet_teardown; }
# shellcheck disable=SC2034 # REDIS_ADDR and FLEET_* are fleet_helpers'

CLUSTER_IP=192.0.2.250
CLUSTER_PORTS=(7001 7002 7003 7004 7005 7006)
REDIS_ADDR="cluster:$CLUSTER_IP:7001,$CLUSTER_IP:7002,$CLUSTER_IP:7003"
FLEET_SERVERS=4		# s4 for an agent a test starts itself
# A suite whose nodes speak only TLS sets both: redis-server's TLS options
# (each node then takes TLS on its port, also for the cluster bus and
# replication), and what redis-cli needs to reach them.
CLUSTER_NODE_TLS=()
CLUSTER_CLI_TLS=()

# ccli PORT ARGS...: redis-cli against the node on PORT.
ccli() {
	local port=$1

	shift
	in_ns redis redis-cli -h "$CLUSTER_IP" -p "$port" "${CLUSTER_CLI_TLS[@]}" "$@"
}

cluster_node_dir() { echo "$FLEET_DIR/redis-$1"; }
cluster_node_pid() { cat "$(cluster_node_dir "$1")/pid" 2>/dev/null || true; }

# cluster_node_start PORT: one cluster-enabled redis-server (no
# persistence), in the background; returns once it answers.  A node that
# ran before keeps its nodes.conf, so it rejoins the cluster.
cluster_node_start() {
	local port=$1 dir n tls=()

	((${#CLUSTER_NODE_TLS[@]})) &&
		tls=(--port 0 --tls-port "$port" --tls-cluster yes --tls-replication yes
			"${CLUSTER_NODE_TLS[@]}")
	dir=$(cluster_node_dir "$port")
	mkdir -p "$dir"
	ip netns exec "$(lab_ns redis)" redis-server --bind "$CLUSTER_IP" --port "$port" \
		--cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
		--cluster-node-timeout 1000 --cluster-require-full-coverage no \
		--repl-diskless-sync-delay 0 \
		--save '' --appendonly no \
		--protected-mode no --dir "$dir" --daemonize no "${tls[@]}" \
		>>"$dir/log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	disown $!
	for ((n = 0; n < 100; n++)); do
		[[ $(ccli "$port" PING 2>/dev/null) == PONG ]] && return 0
		proc_running "$(cluster_node_pid "$port")" || break
		sleep 0.05
	done
	echo "redis-server does not answer on $CLUSTER_IP:$port:" >&2
	tail -n 20 "$dir/log" >&2
	return 1
}

# cluster_ok PORT: the node sees the whole cluster serving every slot.
cluster_ok() {
	ccli "$1" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok'
}

# cluster_master_of KEY [PORT]: the port of the master serving KEY's slot,
# as the node on PORT (default: any that answers) sees it.
cluster_master_of() {
	local slot p

	for p in ${2:-"${CLUSTER_PORTS[@]}"}; do
		slot=$(ccli "$p" CLUSTER KEYSLOT "$1" 2>/dev/null) || continue
		[[ $slot =~ ^[0-9]+$ ]] || continue
		ccli "$p" --json CLUSTER SLOTS 2>/dev/null | jq -r --argjson s "$slot" \
			'.[] | select(.[0] <= $s and $s <= .[1]) | .[2][1]' && return 0
	done
	return 1
}

# cluster_synced: every replica has its master's data (a replica that never
# synced is not promoted when its master fails).
cluster_synced() {
	local p

	for p in "${CLUSTER_PORTS[@]}"; do
		ccli "$p" INFO replication | grep -q '^role:slave' || continue
		ccli "$p" INFO replication | grep -q '^master_link_status:up' || return 1
	done
}

# redis_start (fleet_helpers' is replaced): six nodes, then one cluster of
# three masters with a replica each; returns once every node sees every slot
# served and every master has its replica.
redis_start() {
	local p n addrs=()

	for p in "${CLUSTER_PORTS[@]}"; do
		cluster_node_start "$p" || return 1
		addrs+=("$CLUSTER_IP:$p")
	done
	in_ns redis redis-cli "${CLUSTER_CLI_TLS[@]}" --cluster create "${addrs[@]}" --cluster-replicas 1 \
		--cluster-yes >"$FLEET_DIR/cluster-create.log" 2>&1 || {
		cat "$FLEET_DIR/cluster-create.log" >&2
		return 1
	}
	for ((n = 0; n < 200; n++)); do
		local ok=1
		for p in "${CLUSTER_PORTS[@]}"; do
			cluster_ok "$p" || ok=0
		done
		((ok)) && [[ $(ccli 7001 CLUSTER NODES | grep -c slave) == 3 ]] && cluster_synced &&
			return 0
		sleep 0.05
	done
	echo "the cluster did not settle:" >&2
	ccli 7001 CLUSTER NODES >&2
	return 1
}

# cluster_redis_stop: every node, by PID.
cluster_redis_stop() {
	local p

	for p in "${CLUSTER_PORTS[@]}"; do
		proc_stop "$(cluster_node_pid "$p")" KILL 2>/dev/null || true
	done
}

cluster_setup_file() {
	fleet_setup_file
}

cluster_teardown_file() {
	if [[ -n ${FLEET_DIR:-} ]]; then
		cluster_redis_stop
	fi
	fleet_teardown_file
}

# cluster_wait_ok SECONDS PORT...: every node on PORT sees every slot
# served, and every replica has synced.
cluster_wait_ok() {
	local n p ok

	for ((n = 0; n < $1 * 20; n++)); do
		ok=1
		for p in "${@:2}"; do
			cluster_ok "$p" || ok=0
		done
		((ok)) && cluster_synced && return 0
		sleep 0.05
	done
	echo "cluster not ok after $1 s on: ${*:2}" >&2
	return 1
}

# cluster_restore: a node a test killed is started again (it rejoins as a
# replica), and the cluster is whole, before the next test.
cluster_restore() {
	local p

	for p in "${CLUSTER_PORTS[@]}"; do
		proc_running "$(cluster_node_pid "$p")" || cluster_node_start "$p" || return 1
	done
	cluster_wait_ok 20 "${CLUSTER_PORTS[@]}" && fleet_wait_steady 20
}
