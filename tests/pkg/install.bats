#!/usr/bin/env bats
# make install and make uninstall into a scratch DESTDIR: the files, their
# modes, the unit's paths under PREFIX, the defaults file kept when present,
# and nothing left behind by uninstall.

load helpers

inst() {
	make -s -C "$TOP" BUILD="$BUILD" DESTDIR="$BATS_TEST_TMPDIR/root" "$@"
}

files() {
	(cd "$BATS_TEST_TMPDIR/root" && find . -type f -printf '%m %p\n' | sort)
}

@test "make install puts every file under PREFIX with its mode, and the unit runs that rlagent" {
	inst install PREFIX=/opt/rl
	run files
	echo "$output"
	[[ $output == *"755 ./opt/rl/sbin/rlagent"* ]]
	[[ $output == *"755 ./opt/rl/sbin/rlctl"* ]]
	[[ $output == *"644 ./opt/rl/lib/systemd/system/rlagent.service"* ]]
	[[ $output == *"644 ./etc/default/rlagent"* ]]
	[[ $output == *"644 ./opt/rl/share/man/man8/rlagent.8"* ]]
	[[ $output == *"644 ./opt/rl/share/man/man8/rlctl.8"* ]]
	[[ $output == *"644 ./opt/rl/share/bash-completion/completions/rlctl"* ]]
	[[ $output == *"644 ./opt/rl/share/doc/rlgate/operations.md"* ]]
	# Nothing outside PREFIX but the defaults file.
	[[ -z $(grep -vE ' \./(opt/rl/|etc/default/rlagent$)' <<<"$output") ]]
	[[ $output == *"644 ./opt/rl/share/doc/rlgate/prometheus/rlgate-rules.yml"* ]]
	[[ $output == *"644 ./opt/rl/share/doc/rlgate/grafana/rlgate.json"* ]]
	# the plots beside the docs that show them, README's links made local
	[[ $output == *"644 ./opt/rl/share/doc/rlgate/bench/peers-accuracy.svg"* ]]
	grep -qF '](bench/peers-accuracy.svg)' "$BATS_TEST_TMPDIR/root/opt/rl/share/doc/rlgate/README.md"
	[[ -z $(grep -F '](docs/' "$BATS_TEST_TMPDIR/root/opt/rl/share/doc/rlgate/README.md") ]]

	unit=$BATS_TEST_TMPDIR/root/opt/rl/lib/systemd/system/rlagent.service
	# shellcheck disable=SC2016 # the unit's own variable
	grep -qx 'ExecStart=/opt/rl/sbin/rlagent $RLAGENT_ARGS' "$unit"
	grep -qx 'EnvironmentFile=-/etc/default/rlagent' "$unit"
	grep -q 'file:/opt/rl/share/doc/rlgate/operations.md' "$unit"
	[[ $(grep -v "^#" "$unit" | grep -c /usr/local) == 0 ]]
	cmp "$BUILD/rlagent" "$BATS_TEST_TMPDIR/root/opt/rl/sbin/rlagent"
	run "$BATS_TEST_TMPDIR/root/opt/rl/sbin/rlagent" --version
	[[ $status -eq 0 && $output == "rlagent "[0-9]* ]]
}

@test "the installed unit passes systemd-analyze verify, its man page found" {
	# PREFIX inside the scratch directory, so that ExecStart exists.
	prefix=$BATS_TEST_TMPDIR/usr
	make -s -C "$TOP" BUILD="$BUILD" PREFIX="$prefix" SYSCONFDIR="$BATS_TEST_TMPDIR/etc" install
	run env MANPATH="$prefix/share/man" systemd-analyze verify \
		"$prefix/lib/systemd/system/rlagent.service"
	echo "$output"
	[[ $status -eq 0 ]]
	[[ -z $(grep rlagent <<<"$output") ]]
}

@test "make install keeps an existing /etc/default/rlagent; uninstall removes exactly what it installed" {
	mkdir -p "$BATS_TEST_TMPDIR/root/etc/default" "$BATS_TEST_TMPDIR/root/usr/local/sbin"
	echo 'RLAGENT_ARGS="--iface eth7"' >"$BATS_TEST_TMPDIR/root/etc/default/rlagent"
	echo keep >"$BATS_TEST_TMPDIR/root/usr/local/sbin/other"
	inst install
	grep -qx 'RLAGENT_ARGS="--iface eth7"' "$BATS_TEST_TMPDIR/root/etc/default/rlagent"
	[[ -x $BATS_TEST_TMPDIR/root/usr/local/sbin/rlctl ]]
	inst install		# twice is the same
	inst uninstall
	run files
	echo "$output"
	[[ $output == "$(printf '644 ./etc/default/rlagent\n644 ./usr/local/sbin/other')" ]]
	[[ ! -e $BATS_TEST_TMPDIR/root/usr/local/share/doc/rlgate ]]

	# An unchanged defaults file goes with the rest.
	rm -rf "$BATS_TEST_TMPDIR/root"
	inst install
	inst uninstall
	[[ -z $(files) ]]
}
