#!/usr/bin/env bash
# Installs every Debian package rlgate builds, tests and demos with.
# Idempotent: when everything is present it only asks dpkg and returns.
set -euo pipefail

packages=(
	# build
	make gcc clang llvm pkg-config
	libbpf-dev libelf-dev zlib1g-dev bpftool
	libhiredis-dev liburing-dev libjansson-dev
	libssl-dev		# TLS to Redis (OpenSSL)
	# run and test
	redis-server bats iproute2 jq curl procps util-linux netcat-openbsd
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

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "Error: missing packages (${missing[*]}); run tools/deps.sh as root" >&2
		exit 1
	fi
	echo "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Debian starts (and enables) a prometheus or haproxy server listening
	# on the host when the package is installed; the tests and benchmarks
	# only need the binaries and run their own servers in their labs.  Keep
	# the services from starting while installing, and leave them disabled.
	services=() policy=
	for s in prometheus haproxy; do
		[[ " ${missing[*]} " == *" $s "* ]] && services+=("$s")
	done
	if ((${#services[@]})) && [[ ! -e /usr/sbin/policy-rc.d ]]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' >"$policy"
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
	for s in "${services[@]}"; do
		systemctl stop "$s.service" >/dev/null 2>&1 || true
		systemctl disable "$s.service" >/dev/null 2>&1 || true
	done
fi

# XDP pins live on bpffs; a fresh machine may not have it mounted.
if [[ $(id -u) -eq 0 ]] && ! mountpoint -q /sys/fs/bpf; then
	mount -t bpf bpf /sys/fs/bpf
fi
exit 0
