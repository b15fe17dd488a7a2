#!/usr/bin/env bash
# Installs the Debian packages rlgate builds, tests and demos with.
#   tools/deps.sh                every one: the build, the tests, packaging,
#                                the benchmarks (make deps, make test)
#   tools/deps.sh demo           only what `make demo` needs: the build, and
#                                iproute2, jq, procps, util-linux for its lab
#   tools/deps.sh --list [demo]  prints the set, one package a line
# Idempotent: when everything is present it asks dpkg once and returns.
# No package it installs is left running or enabled as a service: Debian
# starts and enables a redis-server, nginx, prometheus or haproxy listening
# on the host when it is installed, and rlgate's tests and benchmarks only
# need the programs (they run their own servers inside their labs).
set -euo pipefail

build=(
	make gcc clang llvm pkg-config
	libbpf-dev libelf-dev zlib1g-dev bpftool
	libhiredis-dev liburing-dev libjansson-dev
	libssl-dev		# TLS to Redis (OpenSSL)
)
demo=(
	iproute2 procps		# the lab: ip netns, veths, sysctl
	util-linux		# nsenter: the agent inside a namespace
	jq			# reading loadgen's and rlctl's JSON
)
rest=(
	# run and test
	redis-server bats curl netcat-openbsd
	nginx-light		# a real server for the preload library's tests
	libclang-rt-dev		# libFuzzer, for the fuzz tests
	python3-scapy		# crafted packets, for the hostile-client tests
	# packaging, man pages and monitoring rules
	scdoc			# man pages from docs/man/*.scd
	debhelper lintian	# make deb, and its check
	prometheus		# promtool for the rules' tests; a server for the e2e test
	python3-yaml		# reading the rules in their tests
	# the peer benchmark (make bench-peers): what operators run today
	nftables		# nft: limit rate per host, limit over ... drop
	iptables		# iptables -m hashlimit
	haproxy			# 2.6: a stick table shared by peers
	gnuplot-nox		# the benchmark's plots (SVG)
)

# Where a policy-rc.d makes invoke-rc.d refuse every start (exit 101);
# overridable so that tests/pkg/deps.bats can watch it without touching
# the machine's.
policy_rc_d=${RLGATE_POLICY_RC_D:-/usr/sbin/policy-rc.d}

list=0 set=all
while (($#)); do
	case $1 in
	--list) list=1 ;;
	demo | all) set=$1 ;;
	-h | --help)
		sed -n '2,12s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "Error: unknown argument '$1' (expected demo, all or --list)" >&2
		exit 2
		;;
	esac
	shift
done
packages=("${build[@]}" "${demo[@]}")
[[ $set == all ]] && packages+=("${rest[@]}")
if ((list)); then
	printf '%s\n' "${packages[@]}"
	exit 0
fi

# installed: every package dpkg has installed, one a line.
installed() {
	dpkg-query -W -f='${db:Status-Status} ${Package}\n' 2>/dev/null |
		awk '$1 == "installed" { print $2 }' | sort -u
}

# one question to dpkg, however many packages: make test asks every time
mapfile -t have < <(dpkg-query -W -f='${db:Status-Status} ${Package}\n' \
	"${packages[@]}" 2>/dev/null | awk '$1 == "installed" { print $2 }')
missing=()
for p in "${packages[@]}"; do
	[[ " ${have[*]} " == *" $p "* ]] || missing+=("$p")
done

if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "Error: missing packages (${missing[*]}); run tools/deps.sh as root" >&2
		exit 1
	fi
	echo "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	before=$(installed)
	policy=
	if [[ ! -e $policy_rc_d ]]; then
		policy=$policy_rc_d
		printf '#!/bin/sh\n# tools/deps.sh: no service starts while it installs\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	# A fresh machine has no package lists yet; refresh once, not on every run.
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
		apt-get update -q
		apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
	if [[ -n $policy ]]; then
		rm -f "$policy"
		trap - EXIT
	fi
	# What the install enabled (for the next boot) and, had a policy-rc.d
	# of the machine's own allowed it, started: stopped and disabled again.
	# Only the units of packages this run installed; templates (name@)
	# start nothing by themselves.
	while read -r p; do
		while read -r unit; do
			unit=${unit##*/}
			[[ $unit == *@.* ]] && continue
			if [[ $(systemctl is-enabled "$unit" 2>/dev/null) == enabled ]] ||
				systemctl is-active -q "$unit" 2>/dev/null; then
				echo "leaving $unit (from $p) stopped and disabled"
				systemctl disable --now "$unit" >/dev/null 2>&1 || true
			fi
		done < <(dpkg-query -L "$p" 2>/dev/null |
			grep -E '^(/usr)?/lib/systemd/system/[^/]+\.(service|socket)$' || true)
	done < <(comm -13 <(echo "$before") <(installed))
fi

# XDP pins live on bpffs; a fresh machine may not have it mounted.
if [[ $(id -u) -eq 0 ]] && ! mountpoint -q /sys/fs/bpf; then
	mount -t bpf bpf /sys/fs/bpf
fi
exit 0
