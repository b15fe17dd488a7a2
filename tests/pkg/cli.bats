#!/usr/bin/env bats
# rlagent's and loadgen's command lines (rlctl's are in tests/unit/
# test_rlctl.c): a bad one exits 2 before anything starts, with one error
# naming the option, the value and what would be accepted; --help and
# --version go to stdout and exit 0.

load helpers

# usage_error PROG WANT ARGS...: PROG ARGS exits 2, prints nothing on
# stdout, and its first stderr line contains WANT.
usage_error() {
	local prog=$1 want=$2 out err rc
	shift 2
	out=$BATS_TEST_TMPDIR/out
	err=$BATS_TEST_TMPDIR/err
	rc=0
	"$BUILD/$prog" "$@" >"$out" 2>"$err" || rc=$?
	if ((rc != 2)) || [[ -s $out ]] || [[ $(head -n1 "$err") != *"$want"* ]]; then
		echo "$prog $*: exit $rc, stdout '$(cat "$out")', stderr '$(cat "$err")'," \
			"want exit 2 and '$want'" >&2
		return 1
	fi
}

@test "rlagent: a bad command line exits 2 naming the option, the value and what is accepted" {
	usage_error rlagent "rlagent: missing --iface"
	usage_error rlagent "unknown option '--bogus'" -i eth0 --bogus
	usage_error rlagent "unknown option '-Z'" -i eth0 -Z
	usage_error rlagent "option '--iface' needs a value" --iface
	usage_error rlagent "option '--help' takes no value" --help=1
	usage_error rlagent "unexpected argument 'extra'" -i eth0 extra
	usage_error rlagent "invalid --mode 'x': expected auto, native, skb or tc" -i eth0 --mode x
	usage_error rlagent "invalid --log-level 'loud': expected error, warn, info or debug" \
		-i eth0 -l loud
	usage_error rlagent "invalid --lease-ttl '9': expected milliseconds from 10 to 3600000" \
		-i eth0 --lease-ttl 9
	usage_error rlagent "invalid --redis-timeout '0x10': expected milliseconds from 1 to 60000" \
		-i eth0 --redis-timeout 0x10
	usage_error rlagent "invalid --rule-memory '1025': expected MiB from 2 to 1024" \
		-i eth0 --rule-memory 1025
	usage_error rlagent "invalid --tombstone-ttl '0': expected seconds from 1 to 315360000" \
		-i eth0 --tombstone-ttl 0
	usage_error rlagent "invalid --metrics '127.0.0.1': expected HOST:PORT or [IPV6]:PORT" \
		-i eth0 --metrics 127.0.0.1
	usage_error rlagent "invalid --redis 'nope'" -i eth0 --redis nope
	usage_error rlagent "invalid --agent-id '': expected 1 to 256 characters" \
		-i eth0 --redis 127.0.0.1:6379 --agent-id ''
	usage_error rlagent "--heartbeat-stale needs --redis" -i eth0 --heartbeat-stale 500
	usage_error rlagent "--redis-sentinel-password-file needs --redis sentinel:NAME@HOST:PORT" \
		-i eth0 --redis 127.0.0.1:6379 --redis-sentinel-password-file /dev/null
	usage_error rlagent "--redis-sentinel-user needs --redis" -i eth0 --redis-sentinel-user u
	usage_error rlagent "interface 'eth0' given twice" -i eth0 -i eth1,eth0
	usage_error rlagent "must be absolute paths" -i eth0 --pin-dir rel
}

@test "rlagent: --help and --version print on stdout and exit 0" {
	run "$BUILD/rlagent" --help
	[[ $status -eq 0 && ${lines[0]} == "Usage: rlagent "* ]]
	[[ $output == *"--lease-ttl MS"*"(10 to 3600000, default 1000)"* ]]
	run "$BUILD/rlagent" -V
	[[ $status -eq 0 && $output == "rlagent "[0-9]* ]]
}

@test "loadgen: a bad command line exits 2 naming the option and the value" {
	usage_error loadgen "missing --rate N"
	usage_error loadgen "invalid --rate '0': expected connections per second above 0" \
		--rate 0 --duration 1 192.0.2.1:80
	usage_error loadgen "invalid --duration 'x'" --rate 1 --duration x 192.0.2.1:80
	usage_error loadgen "invalid --timeout '0': expected milliseconds from 1 to 600000" \
		--timeout 0
	usage_error loadgen "missing TARGET" --rate 1 --duration 1
	usage_error loadgen "invalid weight in target '192.0.2.1:80@0'" \
		--rate 1 --duration 1 192.0.2.1:80@0
	usage_error loadgen "invalid --serve address 'nope'" --serve nope
	usage_error loadgen "unknown option '--bogus'" --bogus
	run "$BUILD/loadgen" --json --bogus
	[[ $status -eq 2 && $output == *'{"error": "unknown option '"'--bogus'"'"}'* ]]
}
