#!/usr/bin/env bats
# rlagent at scale: --max-tenants sizes the kernel's tenant maps and the
# agent's tables; a set of that many tenants is applied in one request,
# tenants in slots far past the default size limit their clients, a restart
# adopts them all, and what does not fit is refused naming the option.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

N=20000

# tenant_file FILE: N tenants, the first N-2 on /28s of 10.0.0.0/8, then
# c1t (burst 5) and c2t (burst 3) on the clients' prefixes, both at 1/h so
# that what they admitted stays spent.
tenant_file() {
	jq -n --argjson n "$((N - 2))" --arg c1 "$(prefixes c1)" --arg c2 "$(prefixes c2)" \
		'{tenants: ([range($n) as $i | ($i * 16) as $k | {name: "t\($i)",
		rate: "100/s", match: ["10.\($k / 65536 | floor).\(($k / 256 | floor) %
		256).\($k % 256)/28"]}] + [{name: "c1t", rate: "1/h", burst: 5,
		action: "rst", match: ($c1 | split(","))}, {name: "c2t", rate: "1/h",
		burst: 3, action: "rst", match: ($c2 | split(","))}])}' >"$1"
}

# tries CLIENT: 20 connections from CLIENT in one second to s1.
tries() {
	run_loadgen_json "$1" --rate 20 --duration 1 --timeout 500 "$(lab_target s1 "$PORT" 4)"
	# a loaded machine may skip an attempt or two: the checks count what
	# was tried, and there are always more tries than a burst
	expect_between "$1's attempts" "$(json_get .total.attempts)" 10 20
}

@test "--max-tenants 20000: one apply of 20,000 tenants, those past slot 4,095 limit their clients, a restart adopts them all, and tenant 20,001 or other sizes are refused naming --max-tenants" {
	local file=$BATS_TEST_TMPDIR/set.json out rc=0

	agent_start --max-tenants "$N"
	expect_eq "tenants map entries" \
		"$(bpftool -j map show pinned "$PIN_DIR/tenants" | jq .max_entries)" "$N"
	tenant_file "$file"
	rl apply "$file"
	expect_eq "tenants listed" "$(rl --json tenant list | jq length)" "$N"
	expect_between "c1t's slot" "$(rl --json tenant get c1t | jq .id)" 4096 "$((N - 1))"

	tries c1
	expect_eq "c1 connected" "$(json_get .total.connected)" 5
	expect_eq "c1 refused" "$(json_get .total.refused)" "$(($(json_get .total.attempts) - $(json_get .total.connected)))"
	tries c2
	expect_eq "c2 connected" "$(json_get .total.connected)" 3
	expect_eq "c2 refused" "$(json_get .total.refused)" "$(($(json_get .total.attempts) - $(json_get .total.connected)))"
	expect_eq "c1t admitted" "$(stat_get c1t admitted)" 5

	# one more does not fit, and nothing changes
	out=$(rl tenant set extra --rate 10/s --match 198.51.100.0/24 2>&1) || rc=$?
	echo "$out"
	expect_eq "rlctl exit status" "$rc" 2
	[[ $out == *"$N tenants"*"--max-tenants"* ]] ||
		{ echo "the refusal names neither the size nor the option" >&2; return 1; }
	expect_eq "tenants after the refusal" "$(rl --json tenant list | jq length)" "$N"

	# a crash; a restart asking for another size would not fit the pins
	agent_stop KILL
	run agent_exec --iface eth0 --control "$CTL" --state-dir "$STATE_DIR" \
		--pin-dir "$PIN_DIR" --max-tenants 30000
	echo "$output"
	expect_eq "restart exit status" "$status" 1
	[[ $output == *"$PIN_DIR/tenants"*"$N tenants"*"30000"*"--max-tenants $N"* ]] ||
		{ echo "message does not name both sizes and the way out" >&2; return 1; }
	xdp_attached || { echo "the running program was detached" >&2; return 1; }

	# the same size adopts every tenant with its bucket: c1t's tokens stay spent
	agent_start --max-tenants "$N"
	expect_eq "tenants after restart" "$(rl --json tenant list | jq length)" "$N"
	tries c1
	expect_eq "c1 connected after restart" "$(json_get .total.connected)" 0
	expect_eq "c1 refused after restart" "$(json_get .total.refused)" "$(($(json_get .total.attempts) - $(json_get .total.connected)))"
	expect_eq "c2t admitted after restart" "$(stat_get c2t admitted)" 3
}

# ported_file FILE: 100,000 tenants, each a /30 of 10.0.0.0/8 and port
# $PORT, the last two c1t (burst 5, port $PORT) and c2t (burst 3, another
# port) on the clients' prefixes, both at 1/h.
ported_file() {
	jq -n --argjson n 99998 --argjson p "$PORT" --arg c1 "$(prefixes c1)" \
		--arg c2 "$(prefixes c2)" \
		'{tenants: ([range($n) as $i | ($i * 4) as $k | {name: "t\($i)",
		rate: "100/s", ports: [$p], match: ["10.\($k / 65536 | floor).\(($k /
		256 | floor) % 256).\($k % 256)/30"]}] + [{name: "c1t", rate: "1/h",
		burst: 5, action: "rst", ports: [$p], match: ($c1 | split(","))},
		{name: "c2t", rate: "1/h", burst: 3, action: "rst", ports: [$p + 1],
		match: ($c2 | split(","))}])}' >"$1"
}

@test "--max-tenants 100000 alone: 100,000 tenants of a /30 and a port each fit the default rule memory in at most 1 KiB of kernel memory a tenant, a sampled tenant limits its clients on its port and another port's tenant does not, and a restart adopts them all" {
	local file=$BATS_TEST_TMPDIR/ported.json st

	agent_start --max-tenants 100000
	ported_file "$file"
	rl apply "$file"
	expect_eq "tenants listed" "$(rl --json tenant list | jq length)" 100000

	tries c1
	expect_eq "c1 connected" "$(json_get .total.connected)" 5
	expect_eq "c1 refused" "$(json_get .total.refused)" "$(($(json_get .total.attempts) - $(json_get .total.connected)))"
	# c2t names another port: c2's connections to $PORT are no one's
	tries c2
	expect_eq "c2 connected" "$(json_get .total.connected)" "$(json_get .total.attempts)"
	expect_eq "c1t admitted" "$(stat_get c1t admitted)" 5
	expect_eq "c2t admitted" "$(stat_get c2t admitted)" 0

	st=$(rl --json status)
	expect_between "kernel bytes per tenant" "$(jq .memory.kernel_bytes_per_tenant <<<"$st")" 1 1024
	expect_eq "rule tables (the default for 100,000 tenants)" \
		"$(jq .memory.rule_tables_max <<<"$st")" 8192
	expect_between "rule tables in use" "$(jq .memory.rule_tables <<<"$st")" 512 8192
	run rl status
	[[ $output == *"rules:"*"of 8192 tables"*"--rule-memory 16 MiB"* ]] ||
		{ echo "rlctl status does not show the rules' fill" >&2; return 1; }

	# a crash, then an agent with the same flags adopts the pins and the
	# rules: c1t's tokens stay spent
	agent_stop KILL
	agent_start --max-tenants 100000
	expect_eq "tenants after restart" "$(rl --json tenant list | jq length)" 100000
	tries c1
	expect_eq "c1 connected after restart" "$(json_get .total.connected)" 0
	expect_eq "c1 refused after restart" "$(json_get .total.refused)" "$(($(json_get .total.attempts) - $(json_get .total.connected)))"
	expect_eq "c1t admitted after restart" "$(stat_get c1t admitted)" 5
}

@test "among 20,000 tenants, a new tenant, a deletion and a change of prefixes are made in place: each limits (or stops limiting) its clients at once, a conflict is refused naming both tenants, and a restart after SIGKILL replays them from the journal" {
	local file=$BATS_TEST_TMPDIR/set.json out rc=0

	agent_start --max-tenants "$((N + 2))"
	tenant_file "$file"
	rl apply "$file"
	# a rule that names a port, elsewhere: the changes below are still
	# repainted in place around it
	rl tenant set web80 --rate 10/s --match 198.18.0.0/24 --port 80

	# c1t goes: its clients are no one's now
	rl tenant del c1t
	expect_eq "policy.json untouched by the deletion" \
		"$(jq '.tenants | length' "$STATE_DIR/policy.json")" "$N"
	tries c1
	expect_eq "c1 connected with c1t gone" "$(json_get .total.connected)" "$(json_get .total.attempts)"

	# a new tenant on c1's prefixes limits them
	rl tenant set c1n --rate 1/h --burst 4 --action rst --match "$(prefixes c1)"
	tries c1
	expect_eq "c1 connected under c1n" "$(json_get .total.connected)" 4
	expect_eq "c1n admitted" "$(stat_get c1n admitted)" 4

	# c2t cannot take c1's prefixes: c1n has them
	out=$(rl tenant set c2t --rate 1/h --burst 3 --action rst --match "$(prefixes c1)" 2>&1) || rc=$?
	echo "$out"
	expect_eq "rlctl exit status of the conflict" "$rc" 2
	[[ $out == *conflict*"'c1n'"* && $out == *conflict*"'c2t'"* ]] ||
		{ echo "the refusal does not name both tenants" >&2; return 1; }

	# c2t moves off c2's prefixes: c2 is free; a new c2n limits it again
	rl tenant set c2t --rate 1/h --burst 3 --action rst --match 198.51.100.0/24
	tries c2
	expect_eq "c2 connected with c2t moved" "$(json_get .total.connected)" "$(json_get .total.attempts)"
	rl tenant set c2n --rate 1/h --burst 2 --action rst --match "$(prefixes c2)"
	tries c2
	expect_eq "c2 connected under c2n" "$(json_get .total.connected)" 2
	expect_eq "journal lines" "$(wc -l <"$STATE_DIR/policy.journal")" 5

	# a crash: the journal brings every change back, the buckets stay spent
	agent_stop KILL
	agent_start --max-tenants "$((N + 2))"
	expect_eq "tenants after restart" "$(rl --json tenant list | jq length)" "$((N + 2))"
	expect_eq "c1t after restart" "$(rl --json tenant list --name 'c*' | jq -c '[.[].name] | sort')" \
		'["c1n","c2n","c2t"]'
	expect_eq "c2t's prefix after restart" "$(rl --json tenant get c2t | jq -c .match)" '["198.51.100.0/24"]'
	tries c1
	expect_eq "c1 connected after restart" "$(json_get .total.connected)" 0
	tries c2
	expect_eq "c2 connected after restart" "$(json_get .total.connected)" 0
}

@test "20,000 tenants, each with its own series: a scrape runs over turns of the event loop between which rlctl is answered (status sees it running), and each of 20 scrapes has every tenant's series once" {
	local file=$BATS_TEST_TMPDIR/set.json dir=$BATS_TEST_TMPDIR/scrapes pid
	local polls=0 seen=0 i page

	agent_start --max-tenants "$N" --metrics-tenants "$N"
	tenant_file "$file"
	rl apply "$file"
	mkdir -p "$dir"
	# 20 scrapes one after the other, each of some 400,000 lines
	(
		for ((i = 0; i < 20; i++)); do
			in_ns s1 curl -sf --max-time 30 -o "$dir/$i" "http://$METRICS_ADDR/metrics" ||
				echo "scrape $i failed" >>"$dir/errors"
		done
	) &
	pid=$!
	# the control socket meanwhile, 2,000 times at most
	while kill -0 "$pid" 2>/dev/null && ((polls < 2000)); do
		[[ $(rl --json status | jq .metrics.scraping) == true ]] && seen=$((seen + 1))
		polls=$((polls + 1))
	done
	wait "$pid"
	echo "status answered $polls times, $seen of them during a scrape"
	[[ ! -e $dir/errors ]] || { cat "$dir/errors" >&2; return 1; }
	expect_between "status answers during a scrape" "$seen" 1 "$polls"
	expect_eq "scrapes answered" "$(rl --json status | jq .metrics.scrapes)" 20
	expect_eq "scrapes running" "$(rl --json status | jq .metrics.scraping)" false
	for ((i = 0; i < 20; i++)); do
		page=$(cat "$dir/$i")
		expect_eq "scrape $i: tenants with their own series" \
			"$(metric_value rlgate_metrics_tenants "$page")" "$N"
		expect_eq "scrape $i: admitted series" \
			"$(grep -c '^rlgate_admitted_total{' <<<"$page")" "$N"
		expect_eq "scrape $i: series named twice" \
			"$(grep -v '^#' <<<"$page" | cut -d' ' -f1 | sort | uniq -d | wc -l)" 0
		expect_eq "scrape $i: c1t's burst" \
			"$(metric_value 'rlgate_limit_burst{tenant="c1t"}' "$page")" 5
	done
}

# sweeps: how many sweeps of the tenants' counters were whole.
sweeps() { rl --json status | jq .loop.sample_sweeps; }

# sweeps_past N: waits (30 s at most) until more than N sweeps are whole.
sweeps_past() {
	local i
	for ((i = 0; i < 300; i++)); do
		(($(sweeps) > $1)) && return 0
		sleep 0.1
	done
	echo "no sweep of the counters past $1 in 30 s (status: $(rl --json status | jq -c .loop))" >&2
	return 1
}

@test "20,000 tenants' counters are sampled by a sweep over turns of the event loop: every tenant has a rate window, and what a tenant at the sweep's end admitted is in its rate over that window" {
	local file=$BATS_TEST_TMPDIR/set.json s0 s1 st try rate window

	agent_start --max-tenants "$N"
	tenant_file "$file.all"
	# c1t's prefixes and the last slot left to the tenant set below
	jq 'del(.tenants[] | select(.name == "c1t"))' "$file.all" >"$file"
	rl apply "$file"
	# a sweep begun after the apply, whole: every tenant sampled
	sweeps_past "$(($(sweeps) + 1))" || return 1
	expect_eq "tenants without a sample" \
		"$(rl --json stats | jq '[.[] | select(.rate_window_s <= 0)] | length')" 0
	for try in 1 2 3; do
		# at the sweep's end (the highest slot), a fresh burst each try
		rl tenant set late --rate 1/h --burst 7 --match "$(prefixes c1)" --port "$PORT"
		s0=$(sweeps)
		sweeps_past "$s0" || return 1
		# late was sampled before its traffic: the sweep that came after
		# s0 began after the tenant was set
		s0=$(sweeps)
		run_loadgen_json c1 --rate 50 --duration 0.4 --timeout 500 \
			"$(lab_target s1 "$PORT" 4)"
		st=$(rl --json stats late)
		s1=$(sweeps)
		# of its 4 samples kept, one before the traffic unless 3 or more
		# were taken since: at most s1 - s0 whole sweeps and one running
		((s1 - s0 <= 2)) && break
		echo "try $try: $((s1 - s0)) sweeps meanwhile, again" >&2
		rl tenant del late
	done
	echo "$st"
	expect_eq "late's slot" "$(rl --json tenant get late | jq .id)" $((N - 1))
	expect_eq "late admitted" "$(jq '.[0].admitted' <<<"$st")" 7
	rate=$(jq '.[0].admit_rate' <<<"$st")
	window=$(jq '.[0].rate_window_s' <<<"$st")
	expect_between "late's admit_rate x window" \
		"$(awk -v r="$rate" -v w="$window" 'BEGIN { print r * w }')" 6.99 7.01
	# the samples of every tenant kept through the change
	expect_eq "tenants without a sample after the change" \
		"$(rl --json stats | jq '[.[] | select(.rate_window_s <= 0)] | length')" 0
}
