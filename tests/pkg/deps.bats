#!/usr/bin/env bats
# tools/deps.sh: `make demo` asks only for the build's packages and its
# lab's commands, no server among them; `make deps` installs the full set
# with every service start refused and leaves no unit it installed enabled
# or running; with everything present it asks dpkg once and installs
# nothing.  dpkg-query, apt-get and systemctl are stand-ins that record
# what they are asked: the machine's packages and services are not touched.

load helpers

DEPS=$TOP/tools/deps.sh

# fail MESSAGE: fails the test, saying why.
fail() {
	echo "$*" >&2
	return 1
}

# stubs INSTALLED...: stand-ins on PATH for a machine that has the packages
# INSTALLED.  State under $S: installed (names), units/PKG (the systemd
# units PKG ships), pulls/PKG (what installing PKG brings along), enabled
# (units enabled), log (every call).
stubs() {
	S=$BATS_TEST_TMPDIR/state
	mkdir -p "$S/units" "$S/pulls" "$BATS_TEST_TMPDIR/bin"
	printf '%s\n' "$@" >"$S/installed"
	: >"$S/enabled"
	: >"$S/log"
	export RLGATE_POLICY_RC_D=$BATS_TEST_TMPDIR/policy-rc.d S
	cat >"$BATS_TEST_TMPDIR/bin/dpkg-query" <<'EOF'
#!/bin/bash
if [[ $1 == -L ]]; then cat "$S/units/$2" 2>/dev/null; exit 0; fi
echo "dpkg-query $*" >>"$S/log"
shift 2
if (($#)); then
	for p; do grep -qx "$p" "$S/installed" && echo "installed $p"; done
else
	sed 's/^/installed /' "$S/installed"
fi
exit 0
EOF
	cat >"$BATS_TEST_TMPDIR/bin/apt-get" <<'EOF'
#!/bin/bash
rc=none
[[ -x $RLGATE_POLICY_RC_D ]] && { rc=0; "$RLGATE_POLICY_RC_D" x start || rc=$?; }
echo "apt-get $* (policy-rc.d: $rc)" >>"$S/log"
[[ $1 == install ]] || exit 0
for p in "$@"; do
	[[ $p == -* || $p == install ]] && continue
	for q in "$p" $(cat "$S/pulls/$p" 2>/dev/null); do
		echo "$q" >>"$S/installed"
		# what deb-systemd-helper does in a postinst
		if [[ -e $S/units/$q ]]; then sed 's|.*/||; /@\./d' "$S/units/$q" >>"$S/enabled"; fi
	done
done
exit 0
EOF
	cat >"$BATS_TEST_TMPDIR/bin/systemctl" <<'EOF'
#!/bin/bash
echo "systemctl $*" >>"$S/log"
case $1 in
is-enabled) grep -qx "$2" "$S/enabled" && echo enabled || echo disabled ;;
is-active) exit 3 ;;
disable) sed -i "/^${3//./\\.}\$/d" "$S/enabled" ;;
esac
exit 0
EOF
	chmod 755 "$BATS_TEST_TMPDIR"/bin/*
	PATH=$BATS_TEST_TMPDIR/bin:$PATH
}

@test "make demo's package list: the build's packages and its lab's commands, no server, part of make deps's" {
	local demo all p c path pkg cmds

	demo=$("$DEPS" --list demo)
	all=$("$DEPS" --list)
	for p in $demo; do
		grep -qx "$p" <<<"$all" || fail "$p is in the demo's list, not in the full one"
	done
	for p in redis-server nginx-light prometheus haproxy nftables lintian python3-scapy libclang-rt-dev bats; do
		if grep -qx "$p" <<<"$demo"; then fail "the demo does not need $p, yet its list has it"; fi
		grep -qx "$p" <<<"$all" || fail "the full list lost $p"
	done
	# every command demo.sh checks for before it starts comes from the list
	cmds=$(sed -n 's/^for c in \(.*\); do$/\1/p' "$TOP/tools/demo.sh")
	[[ -n $cmds ]] || fail "couldn't find the commands demo.sh checks for"
	for c in $cmds clang gcc make bpftool; do
		path=$(command -v "$c") || fail "no $c on this machine"
		pkg=$(dpkg -S "$path" 2>/dev/null || dpkg -S "${path#/usr}" 2>/dev/null ||
			dpkg -S "$(readlink -f "$path")" 2>/dev/null) || fail "no package owns $path"
		pkg=${pkg%%:*}
		grep -qx "$pkg" <<<"$demo" || fail "$c comes from $pkg, which the demo's list lacks"
	done
	# and no package of it ships a service, but those on every Debian
	for p in $demo; do
		[[ $(dpkg-query -W -f='${Priority}' "$p") =~ ^(required|important)$ ]] && continue
		if dpkg-query -L "$p" | grep -qE '^(/usr)?(/lib/systemd/system/.*\.(service|socket)|/etc/init\.d/.*)$'; then
			fail "$p ships a service"
		fi
	done
}

@test "tools/deps.sh demo installs only the demo's missing packages, with every service start refused" {
	stubs $("$DEPS" --list | grep -vxE 'iproute2|jq|redis-server|nginx-light')
	run "$DEPS" demo
	[[ $status -eq 0 ]] || fail "deps.sh demo exited $status: $output"
	grep -q '^apt-get install ' "$S/log" || fail "nothing installed: $(cat "$S/log")"
	[[ $(grep '^apt-get install' "$S/log") == "apt-get install -y -q --no-install-recommends iproute2 jq (policy-rc.d: 101)" ]] ||
		fail "want only iproute2 and jq, with starts refused: $(cat "$S/log")"
	[[ ! -e $RLGATE_POLICY_RC_D ]] || fail "policy-rc.d left behind"
}

@test "tools/deps.sh leaves no unit of a package it installed enabled, and every other one as it was" {
	stubs $("$DEPS" --list | grep -vxE 'redis-server|nginx-light') nginx-foreign
	printf '/lib/systemd/system/redis-server.service\n/lib/systemd/system/redis-server@.service\n' \
		>"$S/units/redis-server"
	echo nginx-common >"$S/pulls/nginx-light"
	echo /lib/systemd/system/nginx.service >"$S/units/nginx-common"
	# enabled before the run, by the operator: none of deps.sh's business
	echo /lib/systemd/system/haproxy.service >"$S/units/haproxy"
	echo haproxy.service >"$S/enabled"
	run "$DEPS"
	[[ $status -eq 0 ]] || fail "deps.sh exited $status: $output"
	[[ $(grep '^apt-get install' "$S/log") == "apt-get install -y -q --no-install-recommends redis-server nginx-light (policy-rc.d: 101)" ]] ||
		fail "want redis-server and nginx-light, with starts refused: $(cat "$S/log")"
	grep -qx 'systemctl disable --now redis-server.service' "$S/log" || fail "redis-server.service not disabled: $(cat "$S/log")"
	grep -qx 'systemctl disable --now nginx.service' "$S/log" || fail "nginx.service (of nginx-common, pulled in) not disabled: $(cat "$S/log")"
	if grep -q 'redis-server@' "$S/log"; then fail "a template unit was touched: $(cat "$S/log")"; fi
	[[ $(cat "$S/enabled") == haproxy.service ]] || fail "enabled units now: $(cat "$S/enabled")"
	[[ ! -e $RLGATE_POLICY_RC_D ]] || fail "policy-rc.d left behind"
}

@test "tools/deps.sh with every package present asks dpkg once and installs nothing" {
	stubs $("$DEPS" --list)
	run "$DEPS"
	[[ $status -eq 0 && -z $output ]] || fail "deps.sh: exit $status, output '$output'"
	[[ $(grep -c . "$S/log") -eq 1 && $(cat "$S/log") == dpkg-query* ]] ||
		fail "want one dpkg-query and nothing else: $(cat "$S/log")"
}
