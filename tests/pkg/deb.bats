#!/usr/bin/env bats
# The Debian package: `make deb` builds it with debhelper, lintian finds no
# error, and dpkg installs it on this machine, upgrades it to a rebuilt
# package of a higher version while an agent of it protects a lab host, and
# purges it, leaving nothing behind; a removal with the program attached
# leaves it enforcing, says how to detach it, and the documented commands
# do.  Root; about a minute.  Machine-wide
# state (dpkg's database, /etc, /lib/systemd) is touched only between
# install and purge, under a lock, and only when no rlgate is installed.

load helpers
load ../e2e/helpers
load ../e2e/agent_helpers


setup_file() {
	export DEB_BUILD=$BATS_FILE_TMPDIR/build
	make -s -C "$TOP" BUILD="$DEB_BUILD" deb >"$BATS_FILE_TMPDIR/deb.log" 2>&1 ||
		{ tail -n 40 "$BATS_FILE_TMPDIR/deb.log" >&2; return 1; }
	# The same source with a higher version, rebuilt on the first build.
	local src=$DEB_BUILD/deb/rlgate
	{
		printf 'rlgate (%s-9) unstable; urgency=medium\n\n  * Rebuilt.\n\n' \
			"$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version | sed 's/-[^-]*$//')"
		printf ' -- rlgate maintainers <maintainers@users.noreply.a-seed-e0905f82.example>  %s\n\n' \
			"$(date -R)"
		cat "$src/debian/changelog"
	} >"$BATS_FILE_TMPDIR/changelog"
	cp "$BATS_FILE_TMPDIR/changelog" "$src/debian/changelog"
	(cd "$src" && dpkg-buildpackage -b -us -uc -nc -Jauto) >>"$BATS_FILE_TMPDIR/deb.log" 2>&1 ||
		{ tail -n 40 "$BATS_FILE_TMPDIR/deb.log" >&2; return 1; }
}

setup() { e2e_setup; }

# Whatever happened: the agent stopped, the package purged (if this test
# installed it), the lab and the pins gone.
teardown() {
	if [[ -n ${AGENT:-} ]]; then
		proc_stop "$AGENT" KILL 2>/dev/null || true
	fi
	if [[ -e $BATS_TEST_TMPDIR/installed ]]; then
		dpkg --purge rlgate >/dev/null 2>&1 </dev/null || true
	fi
	if [[ -n ${LAB:-} ]]; then
		ip -n "$(lab_ns s1)" link set dev eth0 xdp off 2>/dev/null || true
	fi
	rm -rf "$BATS_TEST_TMPDIR/pins"* 2>/dev/null
	if [[ -n ${PINS:-} ]]; then
		rm -rf "$PINS"
	fi
	e2e_teardown
	return 0
}

deb_file() {
	local v
	v=$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)
	[[ $1 == new ]] && v=${v%-*}-9
	echo "$DEB_BUILD/deb/rlgate_${v}_$(dpkg --print-architecture).deb"
}

@test "make deb builds rlgate_<version>_<arch>.deb with its runtime libraries, and lintian finds no error" {
	v=$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)
	deb=$DEB_BUILD/rlgate_${v}_$(dpkg --print-architecture).deb
	[[ -s $deb ]]
	[[ $(dpkg-deb -f "$deb" Package) == rlgate && $(dpkg-deb -f "$deb" Version) == "$v" ]]
	deps=$(dpkg-deb -f "$deb" Depends)
	echo "Depends: $deps"
	for lib in libbpf1 libc6 libhiredis libjansson4 liburing2; do
		[[ $deps == *"$lib"* ]]
	done
	run dpkg-deb -c "$deb"
	for f in ./usr/sbin/rlagent ./usr/sbin/rlctl ./lib/systemd/system/rlagent.service \
		./etc/default/rlagent ./usr/share/man/man8/rlagent.8.gz ./usr/share/man/man8/rlctl.8.gz \
		./usr/share/bash-completion/completions/rlctl ./usr/share/doc/rlgate/operations.md \
		./usr/share/doc/rlgate/prometheus/rlgate-rules.yml ./usr/share/doc/rlgate/grafana/rlgate.json; do
		[[ $output == *" $f"* ]] || { echo "missing $f"; false; }
	done
	run lintian --fail-on error "$deb" "$(deb_file new)"
	echo "$output"
	[[ $status -eq 0 ]]
	[[ -z $(grep '^E:' <<<"$output") ]]
}

@test "every image and link of the packaged docs is a file of the package (the plots in /usr/share/doc/rlgate/bench, uncompressed)" {
	deb=$DEB_BUILD/rlgate_$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)_$(dpkg --print-architecture).deb
	root=$BATS_TEST_TMPDIR/root
	dpkg-deb -x "$deb" "$root"
	doc=$root/usr/share/doc/rlgate
	# every plot of the tree, and README's among them
	for svg in "$TOP"/docs/bench/*.svg; do
		[[ -s $doc/bench/${svg##*/} ]] || { echo "not shipped: bench/${svg##*/}"; false; }
	done
	grep -qF '](bench/peers-accuracy.svg)' "$doc/README.md"
	run python3 - "$doc" <<'EOF'
import glob, os, re, sys
doc = sys.argv[1]
for md in glob.glob(os.path.join(doc, '*.md')):
    text = re.sub(r'```.*?```', '', open(md).read(), flags=re.S)
    for m in re.finditer(r'\]\(([^)\s#]+)', text):
        target = m.group(1)
        if '://' in target or target.startswith('mailto:'):
            continue
        if not os.path.isfile(os.path.join(doc, target)):
            print(f'{os.path.basename(md)}: {target} is not in the package')
EOF
	echo "$output"
	[[ $status -eq 0 && -z $output ]]
}

@test "dpkg installs, upgrades (a running agent keeps enforcing, the new one adopts its pins) and purges the package" {
	e2e_require_root
	e2e_require_build rlagent pass.bpf.o
	# One such test at a time on the machine: a lock on dpkg's directory
	# (dpkg's own locks are not flock locks), which creates no file.
	exec {lockfd}</var/lib/dpkg
	flock -w 300 "$lockfd"
	if dpkg-query -W -f='${db:Status-Status}' rlgate 2>/dev/null | grep -qv not-installed ||
		[[ -e /etc/default/rlagent || -e /var/lib/rlgate || -e /lib/systemd/system/rlagent.service ]]; then
		skip "rlgate is installed on this machine, or was: not a clean state"
	fi
	old=$DEB_BUILD/rlgate_$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)_$(dpkg --print-architecture).deb
	new=$(deb_file new)
	v_old=$(dpkg-deb -f "$old" Version) v_new=$(dpkg-deb -f "$new" Version)
	dpkg --compare-versions "$v_new" gt "$v_old"

	# --- install ---
	: >"$BATS_TEST_TMPDIR/installed"
	DEBIAN_FRONTEND=noninteractive dpkg -i "$old" </dev/null >"$BATS_TEST_TMPDIR/dpkg.out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/dpkg.out" >&2; false; }
	# the next step, since the unit cannot run yet
	grep -q '^rlgate: Set them in /etc/default/rlagent, e.g. RLAGENT_ARGS="--iface eth0", then' \
		"$BATS_TEST_TMPDIR/dpkg.out" || { cat "$BATS_TEST_TMPDIR/dpkg.out" >&2; false; }
	grep -q '^rlgate:     systemctl enable --now rlagent$' "$BATS_TEST_TMPDIR/dpkg.out"
	[[ $(dpkg-query -W -f='${db:Status-Status} ${Version}' rlgate) == "installed $v_old" ]]
	run /usr/sbin/rlagent --version
	[[ $output == "rlagent ${v_old%-*}" ]]
	run /usr/sbin/rlctl version
	[[ ${lines[0]} == "rlctl ${v_old%-*}" ]]
	[[ $(man -w rlagent) == /usr/share/man/man8/rlagent.8.gz ]]
	[[ $(man -w rlctl) == /usr/share/man/man8/rlctl.8.gz ]]
	dpkg-query -W -f='${Conffiles}\n' rlgate | grep -q '^ /etc/default/rlagent '
	run systemd-analyze verify /lib/systemd/system/rlagent.service
	echo "$output"
	[[ $status -eq 0 && -z $(grep rlagent <<<"$output") ]]
	grep -qx 'ExecStart=/usr/sbin/rlagent $RLAGENT_ARGS' /lib/systemd/system/rlagent.service
	# Neither enabled nor started: unconfigured it would fail at each boot.
	[[ $(systemctl is-enabled rlagent.service) == disabled ]]
	[[ ! -e /etc/systemd/system/multi-user.target.wants/rlagent.service ]]
	[[ -z $(pgrep -f '^/usr/sbin/rlagent') ]]
	# The documented preload pool's directory is writable for the unit.
	grep -qxE 'ReadWritePaths=(.* )?/run( .*)?' /lib/systemd/system/rlagent.service
	grep -q -- '--preload-pool /run/rlgate.pool' /usr/share/doc/rlgate/operations.md*

	# --- the installed agent protects a lab host ---
	lab_up --servers 1 --clients 1
	PINS=/sys/fs/bpf/rlgate-$LAB-deb
	sock=$BATS_TEST_TMPDIR/sock
	mkdir -p "$BATS_TEST_TMPDIR/state"
	RLGATE_BUILD=/usr/sbin rlagent_start s1 "$sock" "$BATS_TEST_TMPDIR/state" "$PINS" \
		"$BATS_TEST_TMPDIR/agent.log"
	AGENT=$RLAGENT_PID
	/usr/sbin/rlctl --socket "$sock" tenant set web --rate 5/s --match "$(client_prefix c1)" >/dev/null
	prog=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id')
	[[ $prog =~ ^[0-9]+$ ]]

	# The operator's settings, and the unit enabled as the install said.
	echo 'RLAGENT_ARGS="--iface eth9"' >/etc/default/rlagent
	systemctl enable rlagent.service 2>/dev/null

	# --- upgrade ---
	DEBIAN_FRONTEND=noninteractive dpkg -i "$new" </dev/null >"$BATS_TEST_TMPDIR/dpkg.out" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/dpkg.out" >&2; false; }
	[[ $(dpkg-query -W -f='${db:Status-Status} ${Version}' rlgate) == "installed $v_new" ]]
	grep -qx 'RLAGENT_ARGS="--iface eth9"' /etc/default/rlagent
	[[ $(systemctl is-enabled rlagent.service) == enabled ]]
	# configured: no next step to print
	if grep -q 'Set them in' "$BATS_TEST_TMPDIR/dpkg.out"; then
		cat "$BATS_TEST_TMPDIR/dpkg.out" >&2
		false
	fi
	# Nothing was detached: the same program enforces, on the same pins.
	[[ $(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id') == "$prog" ]]
	[[ -e $PINS/tenants ]]
	proc_running "$AGENT"
	# The agent restarted on the new binary adopts them: same tenant, and
	# the program attached all along.
	proc_stop "$AGENT" TERM
	[[ $(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id') == "$prog" ]]
	RLGATE_BUILD=/usr/sbin rlagent_start s1 "$sock" "$BATS_TEST_TMPDIR/state" "$PINS" \
		"$BATS_TEST_TMPDIR/agent.log"
	AGENT=$RLAGENT_PID
	run /usr/sbin/rlctl --socket "$sock" --json tenant list
	[[ $(jq -r '.[].name' <<<"$output") == web ]]
	[[ $(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id') =~ ^[0-9]+$ ]]
	grep -q 'adopted pinned' "$BATS_TEST_TMPDIR/agent.log"
	/usr/sbin/rlctl --socket "$sock" detach eth0 >/dev/null
	proc_wait_exit "$AGENT" 5
	AGENT=
	[[ ! -e $PINS ]]

	# --- purge ---
	DEBIAN_FRONTEND=noninteractive dpkg --purge rlgate </dev/null
	rm -f "$BATS_TEST_TMPDIR/installed"
	[[ $(dpkg-query -W -f='${db:Status-Status}' rlgate 2>/dev/null || echo not-installed) == not-installed ]]
	for f in /usr/sbin/rlagent /usr/sbin/rlctl /lib/systemd/system/rlagent.service \
		/etc/default/rlagent /usr/share/man/man8/rlagent.8.gz /usr/share/doc/rlgate \
		/usr/share/bash-completion/completions/rlctl /var/lib/rlgate \
		/etc/systemd/system/multi-user.target.wants/rlagent.service; do
		[[ ! -e $f && ! -L $f ]] || { echo "left behind: $f"; false; }
	done
	run systemctl is-enabled rlagent.service
	[[ $output != enabled ]]
	[[ -z $(compgen -G '/var/lib/systemd/deb-systemd-helper-enabled/*rlagent*') ]]
}

# by_hand NS PINS: the commands of docs/operations.md, "Detaching by hand",
# run as written for eth0 in namespace NS with the pins at PINS (each may
# fail harmlessly, as the page says).
by_hand() {
	local ns=$1 pins=$2 cmd n=0

	while IFS= read -r cmd; do
		cmd=${cmd%%#*}
		cmd=${cmd#sudo }
		[[ $cmd == *"link show"* || -z ${cmd// /} ]] && continue
		cmd=${cmd//IF/eth0}
		cmd=${cmd//\/sys\/fs\/bpf\/rlgate/$pins}
		case $cmd in
		"ip "*) cmd="ip -n $ns ${cmd#ip }" ;;
		"tc "*) cmd="ip netns exec $ns $cmd" ;;
		esac
		echo "by hand: $cmd"
		eval "$cmd" 2>/dev/null || true
		n=$((n + 1))
	done < <(sed -n '/^### Detaching by hand/,/^### /p' "$TOP/docs/operations.md" |
		sed -n '/^```sh$/,/^```$/p' | sed '/^```/d')
	((n >= 5)) || { echo "found only $n commands in operations.md" >&2; return 1; }
}

@test "dpkg -r with the program attached leaves it enforcing and says how to detach, and the documented commands do" {
	e2e_require_root
	e2e_require_build pass.bpf.o
	exec {lockfd}</var/lib/dpkg
	flock -w 300 "$lockfd"
	if dpkg-query -W -f='${db:Status-Status}' rlgate 2>/dev/null | grep -qv not-installed ||
		[[ -e /etc/default/rlagent || -e /var/lib/rlgate || -e /lib/systemd/system/rlagent.service ]]; then
		skip "rlgate is installed on this machine, or was: not a clean state"
	fi
	: >"$BATS_TEST_TMPDIR/installed"
	DEBIAN_FRONTEND=noninteractive dpkg -i \
		"$DEB_BUILD/rlgate_$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)_$(dpkg --print-architecture).deb" \
		</dev/null >/dev/null 2>&1

	lab_up --servers 1 --clients 1
	PINS=/sys/fs/bpf/rlgate-$LAB-deb
	sock=$BATS_TEST_TMPDIR/sock
	mkdir -p "$BATS_TEST_TMPDIR/state"
	# the service's settings, which the removal reads to find the agent
	echo "RLAGENT_ARGS=\"--iface eth0 --pin-dir $PINS --control $sock\"" >/etc/default/rlagent
	RLGATE_BUILD=/usr/sbin rlagent_start s1 "$sock" "$BATS_TEST_TMPDIR/state" "$PINS" \
		"$BATS_TEST_TMPDIR/agent.log"
	AGENT=$RLAGENT_PID
	prog=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id')
	[[ $prog =~ ^[0-9]+$ ]]

	run dpkg -r rlgate
	echo "$output"
	[[ $status -eq 0 ]]
	[[ $output == *"rlgate: WARNING: rlgate's program stays attached after the package is gone"* ]]
	[[ $output == *"interfaces: eth0 (native)"* ]]
	[[ $output == *"rlctl detach IF"* && $output == *"ip link set dev IF xdp off"* ]]
	[[ $output == *"rm -r $PINS"* ]]
	[[ ! -e /usr/sbin/rlctl ]]
	# the choice: still attached and enforcing, on the same pins
	[[ $(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq '.[0].xdp.prog.id') == "$prog" ]]
	[[ -e $PINS/tenants ]]

	proc_stop "$AGENT" KILL
	AGENT=
	by_hand "$(lab_ns s1)" "$PINS"
	[[ $(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].xdp.prog.id // "none"') == none ]]
	[[ -z $(ip netns exec "$(lab_ns s1)" tc filter show dev eth0 egress) ]]
	[[ ! -e $PINS ]]

	run dpkg --purge rlgate
	[[ $status -eq 0 ]]
	rm -f "$BATS_TEST_TMPDIR/installed"
	[[ ! -e /etc/default/rlagent ]]
}
