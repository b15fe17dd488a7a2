# conncap_helpers.bash: what the connection-cap suites (conncap.bats,
# fleet_conncap.bats) share - nginx on a server host keeping idle connections
# open, and clients (conn_client.py) that hold connections to it, driven one
# command at a time.  Processes live in the lab's namespaces and go with it.

CAP_PORT=8081
declare -gA CLIENT_FD CLIENT_OUT

# nginx_start HOST: nginx on HOST:$CAP_PORT (IPv4 and IPv6), one worker,
# keeping idle connections open for a minute.
nginx_start() {
	local h=$1 d=$BATS_TEST_TMPDIR/nginx-$1 i

	mkdir -p "$d"
	cat >"$d/nginx.conf" <<CONF
worker_processes 1;
daemon off;
user root;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path $d;
	client_header_timeout 60s;
	keepalive_timeout 60s;
	server {
		listen $(lab_addr "$h" 4):$CAP_PORT;
		listen [$(lab_addr "$h" 6)]:$CAP_PORT;
		location / { return 200 "ok\n"; }
	}
}
CONF
	in_ns "$h" nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" 3>&- &
	for ((i = 0; i < 100; i++)); do
		in_ns "$h" ss -Htln "sport = :$CAP_PORT" | grep -q . && return 0
		sleep 0.05
	done
	echo "nginx is not listening on $h:$CAP_PORT:" >&2
	cat "$d/error.log" >&2
	return 1
}

# client_start NAME HOST SERVER [4|6]: conn_client.py NAME in HOST against
# SERVER:$CAP_PORT, driven through a fifo by client_do.  CLIENT_PYTHON: the
# interpreter (default python3; forge needs one with scapy).
client_start() {
	local d=$BATS_TEST_TMPDIR fd

	mkfifo "$d/ctl-$1"
	in_ns "$2" "${CLIENT_PYTHON:-python3}" "$BATS_TEST_DIRNAME/conn_client.py" "$(lab_addr "$3" "${4:-4}")" \
		"$CAP_PORT" "$d/ctl-$1" >"$d/out-$1" 2>"$d/err-$1" 3>&- &
	exec {fd}>"$d/ctl-$1"
	CLIENT_FD[$1]=$fd
	CLIENT_OUT[$1]=$d/out-$1
}

# client_do NAME CMD...: one command to client NAME; its JSON answer in
# REPLY.
client_do() {
	local name=$1 out=${CLIENT_OUT[$1]} n i

	shift
	n=$(wc -l <"$out")
	echo "$*" >&"${CLIENT_FD[$name]}"
	for ((i = 0; i < 1200; i++)); do
		(($(wc -l <"$out") > n)) && break
		sleep 0.05
	done
	REPLY=$(tail -n 1 "$out")
	[[ -n $REPLY ]] || { echo "no answer from client $name" >&2; cat "$BATS_TEST_TMPDIR/err-$name" >&2; return 1; }
}

# server_conns HOST [PORT]: connections HOST's kernel holds on PORT (default
# $CAP_PORT) not yet closed by the server (every state but LISTEN and
# TIME-WAIT).
server_conns() {
	in_ns "$1" ss -Htn state all "sport = :${2:-$CAP_PORT}" |
		awk '$1 != "LISTEN" && $1 != "TIME-WAIT" && $1 != "UNCONN"' | wc -l
}

# inst FIELD: one field of `rlctl --json instance get`.
inst() {
	rl --json instance get | jq -r ".$1"
}
