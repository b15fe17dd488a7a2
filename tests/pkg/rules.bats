#!/usr/bin/env bats
# The Prometheus rules of contrib/prometheus: valid for promtool, and every
# alert and recording rule behaving as tests/pkg/prometheus/*.test.yml says.
# (tests/e2e/prometheus.bats evaluates them against a real server.)

load helpers

RULES=$TOP/contrib/prometheus/rlgate-rules.yml

@test "promtool check rules accepts the rules, and every alert has a summary, a description and a severity" {
	run promtool check rules "$RULES"
	echo "$output"
	[[ $status -eq 0 ]]
	# promtool's own linter: no duplicate rules, no problems it knows of.
	run promtool check rules --lint=all --lint-fatal "$RULES"
	echo "$output"
	[[ $status -eq 0 ]]
	run python3 - "$RULES" <<-'PY'
	import sys, yaml
	groups = yaml.safe_load(open(sys.argv[1]))["groups"]
	alerts = [r for g in groups for r in g["rules"] if "alert" in r]
	assert len(alerts) >= 8, len(alerts)
	for r in alerts:
	    a = r.get("annotations", {})
	    assert a.get("summary") and a.get("description"), r["alert"]
	    assert r.get("labels", {}).get("severity") in ("warning", "critical"), r["alert"]
	print(len(alerts), "alerts")
	PY
	echo "$output"
	[[ $status -eq 0 ]]
}

@test "promtool test rules: the recording rules' values and when each alert fires" {
	run promtool test rules "$TOP"/tests/pkg/prometheus/*.test.yml
	echo "$output"
	[[ $status -eq 0 ]]
	# Every alert of the rules is put to the test.
	for a in $(grep -oP '^\s+- alert: \K\S+' "$RULES"); do
		grep -q "alertname: $a\$" "$TOP"/tests/pkg/prometheus/*.test.yml ||
			{ echo "alert $a has no test"; false; }
	done
}

@test "the Grafana dashboard is valid JSON and every query of it is valid PromQL" {
	dash=$TOP/contrib/grafana/rlgate.json
	jq -e '.title == "rlgate" and (.panels | length) > 10' "$dash" >/dev/null
	# Each query, its variables filled as Grafana does, as a recording rule
	# for promtool to parse (tests/e2e/prometheus.bats runs them for real).
	{
		echo 'groups: [{name: dashboard, rules: ['
		jq -r '.panels[].targets[]?.expr' "$dash" |
			sed -e 's/\$job/rlgate/g' -e 's/\$tenant/.+/g' -e 's/\$instance/.+/g' \
			    -e 's/\$__rate_interval/1m/g' |
			jq -cR '{record: "dashboard:query_\(input_line_number)", expr: .}' |
			paste -sd, -
		echo ']}]'
	} >"$BATS_TEST_TMPDIR/dash.yml"
	run promtool check rules "$BATS_TEST_TMPDIR/dash.yml"
	echo "$output"
	[[ $status -eq 0 ]]
	[[ $output == *"SUCCESS: "*" rules found"* ]]
	# Every panel but rows has a query, a title and a description.
	jq -e '[.panels[] | select(.type != "row") |
		select((.targets | length) == 0 or .title == "" or (.description // "") == "")] |
		length == 0' "$dash" >/dev/null
}
