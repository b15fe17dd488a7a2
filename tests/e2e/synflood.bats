#!/usr/bin/env bats
# The SYN-flood generator of the peer benchmark (build/synflood): it sends
# the SYNs it says it sent, from the prefix it was given, with checksums the
# server's kernel accepts.  The benchmark's packets/s figures rest on this.
#
# e2e: solo - it times the load generator itself (attempts on schedule, not
# one skipped), so nothing else runs beside it (tools/run-tests.sh).

load helpers

setup_file() {
	e2e_require_root || return 0
	e2e_require_build synflood pass.bpf.o
	lab_up --servers 1 --clients 1
	serve_start s1 8080
	export FILE_SERVE_PID=$SERVE_PID
	# Counted at the server's ingress, before routing or TCP.
	in_ns s1 nft -f - <<'NFT'
table netdev flood {
	counter prefix { }
	chain in {
		type filter hook ingress device eth0 priority 0;
		ip saddr 192.0.2.192/26 tcp dport 8080 tcp flags == syn counter name prefix accept
	}
}
NFT
}

SYNFLOOD=$RLGATE_BUILD/synflood

# counter NAME: packets through the server's counter NAME.
counter() {
	in_ns s1 nft -j list counter netdev flood "$1" | jq -r '.nftables[1].counter.packets'
}

@test "synflood rejects a bad prefix or address with exit 2, naming the value" {
	run "$SYNFLOOD" --iface eth0 --dst 192.0.2.11:8080 --dst-mac 02:00:00:00:00:01 --src 192.0.2.0/33
	[ "$status" -eq 2 ]
	[[ $output == *"'192.0.2.0/33'"* ]]
	run "$SYNFLOOD" --iface eth0 --dst 192.0.2.11 --dst-mac 02:00:00:00:00:01 --src 192.0.2.0/26
	[ "$status" -eq 2 ]
	[[ $output == *"'192.0.2.11'"* ]]
	run "$SYNFLOOD" --iface eth0 --dst 192.0.2.11:8080 --dst-mac 02:00:00:00:01 --src 192.0.2.0/26
	[ "$status" -eq 2 ]
	[[ $output == *"'02:00:00:00:01'"* ]]
}

@test "synflood --count N sends N SYNs from the prefix, every one reaching the server, valid to its kernel" {
	local mac out sent before csum segs

	mac=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].address')
	before=$(counter prefix)
	csum=$(in_ns s1 nstat -az TcpInCsumErrors | awk '$1 == "TcpInCsumErrors" { print $2 }')
	out=$(in_ns c1 "$SYNFLOOD" --json --iface eth0 --dst "$(lab_target s1 8080)" \
		--dst-mac "$mac" --src 192.0.2.192/26 --count 20000 --rate 40000 --batch 32)
	sent=$(jq -r .sent <<<"$out")
	expect_eq "SYNs reported sent" "$sent" 20000
	# paced at 40,000/s in batches of 32: the last batch goes out at
	# (20000 - 32) / 40000 s, so the rate over the send can be one batch
	# above 40,000 (40,064), never more
	expect_between "packets/s reported" "$(jq -r .pps <<<"$out")" 1000 40065
	# the counter sees them all once the bridge has passed them on
	for _ in {1..20}; do
		(($(counter prefix) - before >= 20000)) && break
		sleep 0.1
	done
	expect_eq "SYNs from 192.0.2.192/26 at the server" $(($(counter prefix) - before)) 20000
	expect_eq "TCP checksum errors at the server" \
		"$(in_ns s1 nstat -az TcpInCsumErrors | awk '$1 == "TcpInCsumErrors" { print $2 }')" "$csum"
	# the listener's kernel took them as SYNs: it answered with SYN-ACKs
	# (or cookies); a malformed segment is dropped before that
	segs=$(in_ns s1 nstat -az TcpOutSegs | awk '$1 == "TcpOutSegs" { print $2 }')
	expect_between "segments the server sent back" "$segs" 1000 1000000000
}

@test "synflood stops at --duration and reports what it sent in that time" {
	local mac out before

	mac=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].address')
	before=$(counter prefix)
	out=$(in_ns c1 "$SYNFLOOD" --json --iface eth0 --dst "$(lab_target s1 8080)" \
		--dst-mac "$mac" --src 192.0.2.192/26 --duration 0.5 --rate 2000)
	expect_between "elapsed" "$(jq -r .elapsed_s <<<"$out")" 0.45 2
	expect_between "SYNs sent at 2000/s for 0.5 s" "$(jq -r .sent <<<"$out")" 900 1001
	sleep 0.3
	expect_eq "SYNs at the server" $(($(counter prefix) - before)) "$(jq -r .sent <<<"$out")"
}

@test "bench-peers --table puts saved figures in the table and judges rlgate's targets from them" {
	local f=$BATS_TEST_TMPDIR/figures

	cat >"$f" <<'FIG'
peers_rlgate_accuracy_skewed 0.981 ratio
peers_rlgate_accuracy_even 0.960 ratio
peers_rlgate_false_refusals_under 0 conns
peers_rlgate_accuracy_bound 1.159 ratio
peers_nft_share_accuracy_skewed 0.480 ratio
peers_haproxy_accuracy_even 0.120 ratio
peers_flood_nft_cpu_s_per_msyn 0.800 s
peers_flood_hashlimit_cpu_s_per_msyn 1.500 s
peers_flood_rlgate_cpu_s_per_msyn 0.150 s
peers_flood_floor_cpu_s_per_msyn 0.100 s
peers_flood_rlgate_legit_success_ratio 0.995 ratio
peers_flood_rlgate_pps 400000 packets/s
peers_flood_rlgate_same_pps 210000 packets/s
peers_flood_rlgate_same_legit_success_ratio 0.020 ratio
peers_flood_rlgate_same_cpu_s_per_msyn 0.350 s
peers_flood_rlgate_verify_pps 120000 packets/s
peers_flood_rlgate_verify_legit_rate_ratio 0.998 ratio
peers_flood_rlgate_verify_legit_success_ratio 1.000 ratio
peers_flood_rlgate_verify_cpu_s_per_msyn 2.500 s
peers_flood_xdp_rlgate_pps 3000000 packets/s
peers_flood_xdp_rlgate_legit_success_ratio 0.998 ratio
peers_flood_xdp_rlgate_legit_first_syn_ratio 0.950 ratio
peers_flood_xdp_rlgate_legit_ring_drops 75 frames
peers_flood_xdp_rlgate_legit_judged_ok_ratio 1.000 ratio
FIG
	run "$RLGATE_ROOT/tools/bench-peers.sh" --table "$f"
	[ "$status" -eq 0 ]
	[[ $output =~ rlgate\ +0\.981\ +0\.960 ]]
	[[ $output =~ nft_share\ +0\.480\ +- ]]
	[[ $output =~ haproxy\ +-\ +0\.120 ]]
	[[ $output =~ rlgate\ +400000 ]]
	# the flood from the client's own tenant: charged at the SYN, verified
	[[ $output =~ rlgate_same\ +210000\ +-\ +0\.020\ +-\ +0\.350 ]]
	[[ $output =~ rlgate_verify\ +120000\ +0\.998\ +1\.000\ +-\ +2\.500 ]]
	[[ $output =~ "rlgate accuracy skewed in [0.97, bound]"\ +0\.981\ +1\.159\ PASS ]]
	[[ $output =~ "rlgate accuracy even in [0.97, bound]"\ +0\.960\ +1\.159\ MISS ]]
	[[ $output =~ "rlgate false refusals under the limit"\ +0\ +0\ PASS ]]
	[[ $output =~ "rlgate legit success under flood"\ +0\.995\ +\>=0\.99\ PASS ]]
	[[ $output =~ "rlgate verify success, same-tenant flood"\ +1\.000\ +\>=0\.99\ PASS ]]
	# XDP frames: judged on what the client connected within 3 s, its
	# first SYN's success and the ring's drops of its frames beside it
	[[ $output =~ rlgate\ +3000000\ +-\ +0\.998\ +-\ +-\ +-\ +0\.950\ +75 ]]
	[[ $output =~ "rlgate legit success under flood, XDP frames"\ +0\.998\ +\>=0\.99\ PASS ]]
	[[ $output =~ "of which on the first SYN (ring drops: 75)"\ +0\.950\ +-\ +- ]]
	[[ $output =~ "connected / client SYNs rlgate judged"\ +1\.000\ +-\ +- ]]
	# one fifth of the better netfilter figure (nft's 0.800), judged on the
	# XDP drop's row, not the verified one's
	[[ $output =~ "rlgate CPU per M SYNs <= best netfilter / 5"\ +0\.150\ +0\.160\ PASS ]]
	# and, not judged, both less the drop-all floor's 0.100
	[[ $output =~ "over the drop-all floor (its best netfilter / 5)"\ +0\.050\ +0\.140\ +- ]]
	# and the floor alone against the same bound
	[[ $output =~ "the drop-all floor alone"\ +0\.100\ +0\.160\ +- ]]
}
