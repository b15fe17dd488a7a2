#!/usr/bin/env bash
# lab.sh: a lab of network namespaces on one machine - servers, clients and
# an optional Redis host on one Ethernet segment, a bridge in its own
# namespace - for rlgate's e2e tests, demo and benchmarks.  See docs/lab.md.
set -euo pipefail

readonly MAX_SERVERS=50 # 192.0.2.11..60, below the first client /28
readonly MAX_CLIENTS=8  # 192.0.2.64/28 .. 192.0.2.176/28

usage() {
	cat <<'EOF'
Usage: tools/lab.sh up NAME [--servers N] [--clients M] [--redis]
       tools/lab.sh down NAME
       tools/lab.sh status NAME
       tools/lab.sh list
       tools/lab.sh --help

Builds (up), inspects (status) and removes (down) a lab of network
namespaces joined by a Linux bridge.  NAME is 1-12 letters, digits or '_'.

  NAME-sw      the switch: bridge br0, one port per host (named like the host)
  NAME-sI      server I (1..50, default 1): 192.0.2.(10+I)   2001:db8:1::a:I
  NAME-cI      client I (0..8, default 1):  192.0.2.(49+16*I) 2001:db8:1:0:I::1
               (client I is alone in 192.0.2.(48+16*I)/28 and 2001:db8:1:0:I::/80)
  NAME-redis   with --redis:                192.0.2.250      2001:db8:1::fa

Each host has one interface, eth0, on 192.0.2.0/24 and 2001:db8:1::/64, and no
route out of the machine.  The switch port of every server runs a pass-all XDP
program ($RLGATE_BUILD/pass.bpf.o, default build/ in the repository) so that
frames an XDP program on the server's eth0 sends back with XDP_TX are delivered.

'down' kills every process left in the lab's namespaces and deletes them; it
also cleans up after an 'up' that failed halfway.  'list' prints the labs.
Exit status: 0 done, 1 failure, 2 bad arguments.
EOF
}

die() {
	echo "Error: $*" >&2
	exit 1
}

usage_error() {
	echo "Error: $*" >&2
	echo "Try 'tools/lab.sh --help'." >&2
	exit 2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${RLGATE_BUILD:-$repo/build}

server_v4() { echo "192.0.2.$((10 + $1))"; }
server_v6() { echo "2001:db8:1::a:$1"; }
client_v4() { echo "192.0.2.$((64 + 16 * ($1 - 1) + 1))"; }
client_v6() { echo "2001:db8:1:0:$1::1"; }
client_net4() { echo "192.0.2.$((64 + 16 * ($1 - 1)))/28"; }
client_net6() { echo "2001:db8:1:0:$1::/80"; }
readonly REDIS_V4=192.0.2.250 REDIS_V6=2001:db8:1::fa

check_name() {
	[[ $1 =~ ^[A-Za-z0-9_]{1,12}$ ]] ||
		usage_error "invalid lab name '$1': expected 1-12 letters, digits or '_'"
}

require_root() {
	[[ $(id -u) -eq 0 ]] || die "couldn't $1 lab '$2': namespaces need root"
}

# The lab's namespaces, exactly the names 'up' creates: nothing else that
# merely starts with NAME- is ever touched.
lab_namespaces() {
	ip netns list 2>/dev/null | awk '{ print $1 }' |
		grep -E "^$1-(sw|s[0-9]+|c[0-9]+|redis)\$" | sort -V || true
}

# Host namespaces first, the switch last: deleting the switch takes every
# veth with it.
ordered_namespaces() {
	lab_namespaces "$1" | grep -v -- '-sw$' || true
	lab_namespaces "$1" | grep -- '-sw$' || true
}

kill_lab_processes() {
	local ns pids=() p

	for ns in "$@"; do
		# shellcheck disable=SC2207
		pids+=($(ip netns pids "$ns" 2>/dev/null || true))
	done
	((${#pids[@]})) || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for _ in {1..10}; do
		local alive=()
		for p in "${pids[@]}"; do
			kill -0 "$p" 2>/dev/null && alive+=("$p")
		done
		((${#alive[@]})) || return 0
		pids=("${alive[@]}")
		sleep 0.1
	done
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

delete_namespaces() {
	local ns rc=0

	kill_lab_processes "$@"
	for ns in "$@"; do
		if ! err=$(ip netns del "$ns" 2>&1); then
			echo "Error: couldn't delete namespace on '$ns': $err" >&2
			rc=1
		fi
	done
	return $rc
}

cmd_down() {
	local name=$1 nss

	require_root remove "$name"
	mapfile -t nss < <(ordered_namespaces "$name")
	if ((${#nss[@]} == 0)); then
		echo "lab $name: nothing to remove"
		return 0
	fi
	delete_namespaces "${nss[@]}" || die "couldn't remove lab '$name' completely"
	echo "lab $name: removed ${#nss[@]} namespaces"
}

# --- up ------------------------------------------------------------------------

created=()
up_done=0

# On any failure of 'up', remove what this run created - and only that, so a
# concurrent 'up' of the same name cannot make us delete its namespaces.
up_cleanup() {
	local rc=$?

	if ((up_done == 0 && ${#created[@]})); then
		echo "Error: couldn't build lab '$lab': removing its ${#created[@]} namespaces" >&2
		local rev=() i
		for ((i = ${#created[@]} - 1; i >= 0; i--)); do rev+=("${created[i]}"); done
		delete_namespaces "${rev[@]}" || true
	fi
	exit $rc
}

ns_add() {
	local err

	err=$(ip netns add "$1" 2>&1) || die "couldn't create namespace on '$1': $err"
	created+=("$1")
	ip -n "$1" link set lo up
}

# add_host NS PORT V4 V6: a host namespace with eth0, whose peer PORT is a
# bridge port in the switch.
add_host() {
	local ns=$1 port=$2 v4=$3 v6=$4

	ns_add "$ns"
	ip -n "$lab-sw" link add "$port" type veth peer name eth0 netns "$ns"
	ip -n "$lab-sw" link set "$port" master br0 up
	# nodad: the tests must be able to bind and connect the moment 'up'
	# returns, not after duplicate address detection (~1 s).
	ip -n "$ns" addr add "$v4/24" dev eth0
	ip -n "$ns" addr add "$v6/64" dev eth0 nodad
	ip -n "$ns" link set eth0 up
}

cmd_up() {
	local servers=1 clients=1 redis=0 i ns err

	while (($#)); do
		case $1 in
		--servers | --clients)
			(($# >= 2)) || usage_error "option '$1' needs a value"
			[[ $2 =~ ^[0-9]+$ ]] || usage_error "invalid $1 '$2': expected an integer"
			if [[ $1 == --servers ]]; then servers=$((10#$2)); else clients=$((10#$2)); fi
			shift 2
			;;
		--redis)
			redis=1
			shift
			;;
		*) usage_error "unknown argument '$1' to 'up'" ;;
		esac
	done
	((servers <= MAX_SERVERS)) || usage_error "invalid --servers '$servers': expected 0 to $MAX_SERVERS"
	((clients <= MAX_CLIENTS)) || usage_error "invalid --clients '$clients': expected 0 to $MAX_CLIENTS"
	((servers + clients + redis > 0)) || usage_error "a lab needs at least one host"

	require_root build "$lab"
	if [[ -n $(lab_namespaces "$lab") ]]; then
		die "couldn't build lab '$lab': it exists already ($(lab_namespaces "$lab" | tr '\n' ' ')); run 'tools/lab.sh down $lab' first"
	fi
	local xdp_obj=$build/pass.bpf.o
	if ((servers)) && [[ ! -r $xdp_obj ]]; then
		die "couldn't find XDP object on '$xdp_obj': build it with 'make $xdp_obj' (or set RLGATE_BUILD)"
	fi

	trap up_cleanup EXIT

	ns_add "$lab-sw"
	# The switch only forwards frames: no IPv6 on its ports means no router
	# solicitations or MLD reports from it in a capture.
	ip netns exec "$lab-sw" sysctl -q -w net.ipv6.conf.default.disable_ipv6=1 \
		net.ipv6.conf.all.disable_ipv6=1
	# Without STP a port forwards at once; without multicast snooping IPv6
	# neighbour discovery reaches every host from the first packet.
	ip -n "$lab-sw" link add br0 type bridge stp_state 0 mcast_snooping 0
	ip -n "$lab-sw" link set br0 up

	for ((i = 1; i <= servers; i++)); do
		ns=$lab-s$i
		add_host "$ns" "s$i" "$(server_v4 "$i")" "$(server_v6 "$i")"
		# A veth delivers frames sent with XDP_TX only when its peer runs
		# an XDP program too; rlgate's RST replies are such frames.
		err=$(ip -n "$lab-sw" link set dev "s$i" xdpdrv obj "$xdp_obj" sec xdp 2>&1) ||
			die "couldn't attach XDP program on '$lab-sw/s$i': $err"
	done
	for ((i = 1; i <= clients; i++)); do
		ns=$lab-c$i
		add_host "$ns" "c$i" "$(client_v4 "$i")" "$(client_v6 "$i")"
		# Every ephemeral port: a client opens thousands of connections
		# per second (loadgen closes with RST, so none sit in TIME_WAIT).
		ip netns exec "$ns" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
	done
	if ((redis)); then
		add_host "$lab-redis" redis "$REDIS_V4" "$REDIS_V6"
	fi
	up_done=1
	trap - EXIT

	echo "lab $lab up"
	print_hosts "$lab"
}

# --- status ----------------------------------------------------------------------

# print_hosts NAME: one line per host, from what is really there.
print_hosts() {
	local lab=$1 ns host v4 v6 xdp pids note

	printf '%-6s %-16s %-14s %-20s %-10s %s\n' HOST NAMESPACE IPV4 IPV6 XDP PROCS
	while read -r ns; do
		host=${ns#"$lab"-}
		[[ $host == sw ]] && continue
		v4=$(ip -n "$ns" -o -4 addr show dev eth0 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
		v6=$(ip -n "$ns" -o -6 addr show dev eth0 scope global 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
		xdp=$(ip -n "$ns" link show dev eth0 2>/dev/null | grep -oE 'prog/xdp[a-z]* id [0-9]+' | head -1 || true)
		[[ -n $xdp ]] && xdp="id ${xdp##* }" || xdp=-
		pids=$(ip netns pids "$ns" 2>/dev/null | wc -l)
		note=
		if [[ $host =~ ^c([0-9]+)$ ]]; then
			note="  alone in $(client_net4 "${BASH_REMATCH[1]}") $(client_net6 "${BASH_REMATCH[1]}")"
		fi
		printf '%-6s %-16s %-14s %-20s %-10s %s%s\n' "$host" "$ns" "${v4:--}" "${v6:--}" \
			"$xdp" "$pids" "$note"
	done < <(lab_namespaces "$lab")
}

cmd_status() {
	local lab=$1 sw=$1-sw port ports

	require_root inspect "$lab"
	[[ -n $(lab_namespaces "$lab") ]] || die "couldn't find lab '$lab': no namespace $lab-*"
	echo "lab $lab"
	print_hosts "$lab"
	if ip netns list | awk '{ print $1 }' | grep -qx "$sw"; then
		ports=$(ip -n "$sw" -o link show master br0 2>/dev/null |
			awk -F': ' '{ sub("@.*", "", $2); print $2 }' | tr '\n' ' ')
		echo "switch $sw: br0 ports: ${ports:-none}"
		for port in $ports; do
			if ip -n "$sw" link show dev "$port" | grep -q 'prog/xdp'; then
				echo "  $port: pass-all XDP attached (XDP_TX from its host is delivered)"
			fi
		done
	else
		echo "switch $sw: missing (a partial lab: run 'tools/lab.sh down $lab')"
		return 1
	fi
}

cmd_list() {
	ip netns list 2>/dev/null | awk '{ print $1 }' | sed -n 's/^\([A-Za-z0-9_]\{1,12\}\)-sw$/\1/p' | sort
}

# --- main ------------------------------------------------------------------------

(($#)) || usage_error "missing command: up, down, status or list"
case $1 in
-h | --help | help)
	usage
	exit 0
	;;
up | down | status)
	cmd=$1
	shift
	[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
	(($#)) || usage_error "missing lab NAME for '$cmd'"
	check_name "$1"
	lab=$1
	shift
	case $cmd in
	up) cmd_up "$@" ;;
	down)
		(($# == 0)) || usage_error "unexpected argument '$1' to 'down'"
		cmd_down "$lab"
		;;
	status)
		(($# == 0)) || usage_error "unexpected argument '$1' to 'status'"
		cmd_status "$lab"
		;;
	esac
	;;
list)
	cmd_list
	;;
*)
	usage_error "unknown command '$1': expected up, down, status or list"
	;;
esac
