#!/usr/bin/env bats
# The Prometheus rules and the Grafana dashboard of contrib/ against a real
# Prometheus: it scrapes two rlagents of a fleet lab (Redis, load from two
# clients) with the rules loaded, and every rule evaluates without error,
# every recording rule and every dashboard query returns series (for each of
# the lab's tenants where it is per tenant).  rlctl's bash completion is
# checked against the same agents.
#
# Prometheus runs inside the lab's Redis host, listening on that namespace's
# loopback only; it is stopped by PID.  About 40 seconds.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

# shellcheck disable=SC2030,SC2031 # PROM_* are exported for the tests

load helpers
load agent_helpers
load fleet_helpers

FLEET_SERVERS=2
FLEET_AGENTS=2
# Each agent in its own namespace, on its lab address (and that namespace's
# loopback), so that the Prometheus host can scrape it.
METRICS_ADDR=0.0.0.0:9464
PROM_ADDR=127.0.0.1:19090
RULES=$RLGATE_ROOT/contrib/prometheus/rlgate-rules.yml
DASHBOARD=$RLGATE_ROOT/contrib/grafana/rlgate.json
TENANTS=(web api)

# prom_get PATH [curl args]: GET PATH of the lab's Prometheus, from inside its
# host.
prom_get() {
	local path=$1

	shift
	in_ns redis curl -sf --max-time 10 "$@" "http://$PROM_ADDR$path"
}

# prom_query EXPR: the API's reply (JSON) to an instant query of EXPR.
prom_query() {
	prom_get /api/v1/query -G --data-urlencode "query=$1"
}

prom_start() {
	local dir=$BATS_FILE_TMPDIR/prometheus n

	mkdir -p "$dir/data"
	cat >"$dir/prometheus.yml" <<-CONF
	global:
	  scrape_interval: 1s
	  evaluation_interval: 1s
	rule_files:
	  - $RULES
	scrape_configs:
	  - job_name: rlgate
	    static_configs:
	      - targets: ['$(lab_addr s1):9464', '$(lab_addr s2):9464']
	CONF
	ip netns exec "$(lab_ns redis)" prometheus --config.file="$dir/prometheus.yml" \
		--storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=1h \
		--web.listen-address="$PROM_ADDR" --log.level=warn \
		>>"$dir/log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	disown $!
	for ((n = 0; n < 300; n++)); do
		prom_get /-/ready >/dev/null 2>&1 && return 0
		proc_running "$(<"$dir/pid")" || break
		sleep 0.1
	done
	echo "prometheus is not ready:" >&2
	tail -n 20 "$dir/log" >&2
	return 1
}

prom_stop() {
	local f=$BATS_FILE_TMPDIR/prometheus/pid

	if [[ -s $f ]]; then
		proc_stop "$(<"$f")" TERM 2>/dev/null || proc_stop "$(<"$f")" KILL 2>/dev/null || true
	fi
	rm -f "$f"
	return 0
}

# prom_wait EXPR SECONDS: waits until EXPR returns at least one series.
prom_wait() {
	local n

	for ((n = 0; n < $2 * 4; n++)); do
		[[ $(prom_query "$1" 2>/dev/null | jq '.data.result | length') -gt 0 ]] 2>/dev/null &&
			return 0
		sleep 0.25
	done
	echo "no series for '$1' after $2 s" >&2
	return 1
}

setup_file() {
	fleet_setup_file prometheus
	[[ -n ${LAB:-} ]] || return 0
	# web: enforced, offered five times its limit; api: shadow, offered
	# twice its limit.  Each client spreads its load over both hosts.
	rls 1 tenant set web --rate 20/s --burst 20 --match "$(client_prefix c1)" --port "$PORT" >/dev/null
	rls 1 tenant set api --rate 10/s --burst 10 --match "$(client_prefix c2)" --port "$PORT" --shadow >/dev/null
	for t in "${TENANTS[@]}"; do
		fleet_wait_tenant "$t" 5 >/dev/null
	done
	prom_start
	# shellcheck disable=SC2046 # several loadgen targets
	loadgen_bg c1 "$BATS_FILE_TMPDIR/load1" --rate 100 --duration 20 $(fleet_targets "$PORT" 1 1)
	echo "$LOADGEN_BG_PID" >"$BATS_FILE_TMPDIR/load.pids"
	# shellcheck disable=SC2046
	loadgen_bg c2 "$BATS_FILE_TMPDIR/load2" --rate 20 --duration 20 $(fleet_targets "$PORT" 1 1)
	echo "$LOADGEN_BG_PID" >>"$BATS_FILE_TMPDIR/load.pids"
	# Rates need two scrapes with traffic, the ratio needs denials.
	prom_wait 'tenant:rlgate_denied:ratio_rate1m{tenant="web"} > 0' 30
	prom_wait 'count(instance_tenant:rlgate_denied:rate1m) == 4' 30
	prom_wait 'tenant:rlgate_shadow_denied:rate1m{tenant="api"} > 0' 30
	prom_wait 'count(rate(rlgate_leases_total[1m]) > 0) == 4' 30
	prom_wait 'count(instance:rlgate_lease_seconds:p99_rate5m >= 0) == 2' 30
}

teardown_file() {
	local pid

	if [[ -s ${BATS_FILE_TMPDIR:-}/load.pids ]]; then
		while read -r pid; do
			kill -KILL "$pid" 2>/dev/null || true
		done <"$BATS_FILE_TMPDIR/load.pids"
	fi
	prom_stop
	fleet_teardown_file
}

setup() { e2e_setup; }
teardown() {
	if [[ ${BATS_TEST_COMPLETED:-} != 1 && -s $BATS_FILE_TMPDIR/prometheus/log ]]; then
		echo "--- prometheus log ---" >&2
		tail -n 20 "$BATS_FILE_TMPDIR/prometheus/log" >&2
	fi
}

# expect_series WHAT EXPR: EXPR returns series; when they carry an instance
# label, of both agents; when they carry a tenant label, of every tenant of
# the lab.
expect_series() {
	local what=$1 expr=$2 out n t tenants instances

	out=$(prom_query "$expr") || { echo "$what: query failed: $expr" >&2; return 1; }
	if [[ $(jq -r .status <<<"$out") != success ]]; then
		echo "$what: $(jq -r .error <<<"$out"): $expr" >&2
		return 1
	fi
	n=$(jq '.data.result | length' <<<"$out")
	((n > 0)) || { echo "$what: no series: $expr" >&2; return 1; }
	instances=$(jq '[.data.result[].metric.instance // empty] | unique | length' <<<"$out")
	if ((instances)) && ((instances != 2)); then
		echo "$what: series of $instances agents, not 2: $expr" >&2
		return 1
	fi
	tenants=$(jq -r '[.data.result[].metric.tenant // empty] | unique | join(" ")' <<<"$out")
	if [[ -n $tenants ]]; then
		for t in "${TENANTS[@]}"; do
			[[ " $tenants " == *" $t "* ]] ||
				{ echo "$what: no series of tenant $t (only: $tenants): $expr" >&2; return 1; }
		done
	fi
	echo "$what: $n series${tenants:+ (tenants $tenants)}"
}

@test "Prometheus scrapes both agents, in fleet mode" {
	out=$(prom_query 'up{job="rlgate"} == 1')
	[[ $(jq '.data.result | length' <<<"$out") == 2 ]]
	out=$(prom_query 'rlgate_agent_info{mode="fleet"}')
	[[ $(jq '.data.result | length' <<<"$out") == 2 ]]
	out=$(prom_query 'max(rlgate_live_agents)')
	[[ $(jq -r '.data.result[0].value[1]' <<<"$out") == 2 ]]
}

@test "every rule of rlgate-rules.yml is loaded and evaluates without error" {
	out=$(prom_get /api/v1/rules)
	loaded=$(jq '[.data.groups[].rules[]] | length' <<<"$out")
	want=$(grep -cE '^\s+- (record|alert):' "$RULES")
	echo "loaded $loaded of $want rules"
	[[ $loaded == "$want" ]]
	bad=$(jq -r '.data.groups[].rules[] | select(.health != "ok") |
		"\(.name): \(.health) \(.lastError // "")"' <<<"$out")
	echo "$bad"
	[[ -z $bad ]]
	# Evaluated at least once each (every group ran since the load).
	[[ -z $(jq -r '.data.groups[] | select(.lastEvaluation | startswith("0001")) | .name' <<<"$out") ]]
}

@test "every recording rule returns series for the lab's tenants, and every alert expression evaluates" {
	local r e fails=0

	for r in $(grep -oP '^\s+- record: \K\S+' "$RULES"); do
		expect_series "$r" "$r" || fails=$((fails + 1))
	done
	# No alert is expected to fire here: each is asked as a query.
	while IFS= read -r e; do
		out=$(prom_query "$e") && [[ $(jq -r .status <<<"$out") == success ]] ||
			{ echo "alert expression fails: $e" >&2; fails=$((fails + 1)); }
	done < <(python3 -c '
import sys, yaml
for g in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for r in g["rules"]:
        if "alert" in r:
            print(" ".join(r["expr"].split()))' "$RULES")
	((fails == 0))
	# The refusal and the lab's fleet, as the recording rules see them.
	out=$(prom_query 'tenant:rlgate_denied:ratio_rate1m{tenant="web"}')
	ratio=$(jq -r '.data.result[0].value[1]' <<<"$out")
	echo "web refused share: $ratio"
	[[ $(calc "($ratio > 0.3 && $ratio < 1)") == 1 ]]
	out=$(prom_query 'job:rlgate_agents_up:sum')
	[[ $(jq -r '.data.result[0].value[1]' <<<"$out") == 2 ]]
}

@test "every query of the Grafana dashboard returns series for the lab's tenants" {
	local e fails=0 n=0

	jq -e '.panels | length > 10' "$DASHBOARD" >/dev/null
	# Template variables as Grafana fills them with "All".
	while IFS= read -r e; do
		n=$((n + 1))
		expect_series "query $n" "$e" || fails=$((fails + 1))
	done < <(jq -r '.panels[].targets[]?.expr' "$DASHBOARD" |
		sed -e 's/\$job/rlgate/g' -e 's/\$tenant/.+/g' -e 's/\$instance/.+/g' \
		    -e 's/\$__rate_interval/1m/g')
	echo "$n queries, $fails failed"
	((n >= 20 && fails == 0))
	# The variables' own queries: label_values(SELECTOR, LABEL).
	while IFS= read -r e; do
		sel=$(sed -E 's/^label_values\((.*), *[a-z_]+\)$/\1/; s/\$job/rlgate/g' <<<"$e")
		expect_series "variable" "$sel" || fails=$((fails + 1))
	done < <(jq -r '.templating.list[] | select(.type == "query") | .query.query' "$DASHBOARD")
	((fails == 0))
}

@test "rlctl's bash completion offers the running agent's tenants and interfaces" {
	# shellcheck source=/dev/null
	source "$RLGATE_ROOT/contrib/bash-completion/rlctl"
	PATH=$RLGATE_BUILD:$PATH
	COMP_WORDS=(rlctl --socket "$(fleet_ctl 1)" tenant get "")
	COMP_CWORD=5
	_rlctl
	[[ $(printf '%s\n' "${COMPREPLY[@]}" | sort | xargs) == "api web" ]]
	COMP_WORDS=(rlctl --socket "$(fleet_ctl 2)" detach "")
	COMP_CWORD=4
	_rlctl
	[[ ${COMPREPLY[*]} == eth0 ]]
}


@test "each agent's rlgate_host_* totals equal the sum of its tenants' series (with fewer tenants than --metrics-tenants)" {
	local m out

	for m in admitted_total denied_total shadow_denied_total tokens_leased_total \
		tenant_redis_calls_total degraded_total; do
		out=$(prom_query "count(rlgate_host_$m == on(instance) sum by (instance) (rlgate_$m))")
		expect_eq "agents whose rlgate_host_$m is the sum over tenants" \
			"$(jq -r '.data.result[0].value[1] // 0' <<<"$out")" 2
	done
	out=$(prom_query 'count(rlgate_metrics_tenants == 2)')
	expect_eq "agents with series of both tenants" "$(jq -r '.data.result[0].value[1] // 0' <<<"$out")" 2
}
