#!/usr/bin/env bash
# The full-disk test (issue #46; docs/testing.md, "A full disk"): a three-node cluster of release
# binaries, each node's data directory on a small tmpfs this script mounts (so it needs root),
# filled under load until its free space falls below the node's reserve. Then:
#
#   1. writes are refused with 4010 (`CannotAppendMessage`), and no node exits;
#   2. reads are still served: `verify` reads every partition back from every node while full;
#   3. space is freed (a ballast file on each tmpfs is deleted) and writes resume by themselves:
#      a second load is acknowledged;
#   4. `verify` of both loads' ledgers finds every acknowledged message on every node exactly
#      once, and `iggy-fsck` exits 0 on every node's directory.
#
#   scripts/full-disk.sh             # about a minute
#   RESERVE_MIB=0 scripts/full-disk.sh   # no reserve: the disk fills between two looks at it
#   RESERVE_MIB=0 SKEW_MIB=128 scripts/full-disk.sh   # and node 2's disk fills first
#   KEEP=1 scripts/full-disk.sh      # keep the directory (logs, ledgers); the mounts are undone
#
# Each tmpfs is $SIZE_MIB (default 1024) with a ballast of $BALLAST_MIB (384); the nodes keep
# `free_reserve_bytes` = $RESERVE_MIB (default 256) MiB and 64 MiB segments. With no reserve
# nothing refuses a write before a primary finds no room for a partition's next segment: that
# prepare is refused (nothing appended, no node stops) and every node then refuses writes with
# 4010 until its next look at the free space (`docs/server.md`, "Limits and a full disk"); the
# script also requires such refusals (`iggy_prepares_refused_no_room_total`). With $SKEW_MIB
# (default 0) node 2's ballast is that much larger: its disk fills while its peers still have
# room, so as a backup it cannot journal what its primaries took; it goes on (its journal
# writes refused and tried again, `iggy_journals_refused_no_room_total`, which the script then
# requires), reads while full are checked on nodes 0 and 1 (node 2 lacks what it could not
# journal), and once space is freed node 2 catches up (the final `verify` reads every node). Uses ports 8990-8992, 9990-9992 and
# 10990-10992 on loopback and a directory under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "full-disk.sh: SKIPPED: mounting a tmpfs needs root (run it as root, or in a container that allows mounts)"
    exit 0
fi
size=${SIZE_MIB:-1024}
ballast=${BALLAST_MIB:-384}
reserve=$((${RESERVE_MIB:-256} << 20))
skew=${SKEW_MIB:-0}
cargo build --release -q -p iggy-server -p iggy-fsck
S=$PWD/target/release/iggy-server
F=$PWD/target/release/iggy-fsck
dir=$(mktemp -d /tmp/iggy-full-disk.XXXXXX)
base=8990
nodes=127.0.0.1:8990,127.0.0.1:8991,127.0.0.1:8992
source scripts/cluster.sh
metric() { metrics "$1" | awk -v m="$2" '$1 == m { print $2 }'; }
cleanup() {
    for i in 0 1 2; do p=$(pid_of $i); [ -n "$p" ] && kill $p 2>/dev/null; done
    [ -n "${dev:-}" ] && kill "$dev" 2>/dev/null || true
    wait 2>/dev/null || true
    for i in 0 1 2; do mountpoint -q "$dir/disk-$i" && umount "$dir/disk-$i"; done
    [ -z "${KEEP:-}" ] && rm -rf "$dir"
    return 0
}
trap cleanup EXIT
write_configs
# Each node's directory moves onto its own small file system.
for i in 0 1 2; do
    mkdir -p "$dir/disk-$i"
    mount -t tmpfs -o "size=${size}m" tmpfs "$dir/disk-$i"
    cp -a "$dir/cluster/node-$i" "$dir/disk-$i/node-$i"
    rm -rf "$dir/cluster/node-$i"
    sed -i "s|^data_dir = .*|data_dir = \"$dir/disk-$i/node-$i\"|" "$dir/cluster/node-$i.toml"
    printf '\n[limits]\nfree_reserve_bytes = %d\n' $reserve >> "$dir/cluster/node-$i.toml"
    extra=0; [ $i = 2 ] && extra=$skew
    head -c $(((ballast + extra) << 20)) /dev/zero > "$dir/disk-$i/ballast"
done
for i in 0 1 2; do ( "$S" run --config "$dir/cluster/node-$i.toml" >> "$dir/node-$i.out" 2>> "$dir/node-$i.err" & ); done
for i in 0 1 2; do wait_up $i; done
pids=(); for i in 0 1 2; do pids+=("$(pid_of $i)"); done
free_mib() { echo $(( $(stat -f -c '%a * %S' "$dir/disk-$1" ) / 1048576 )); }
echo "free before the load: $(free_mib 0) / $(free_mib 1) / $(free_mib 2) MiB of ${size} MiB each (reserve $((reserve >> 20)) MiB, ballast ${ballast} MiB, node 2 ${skew} MiB more)"
status=0
# 1. Fill: producers as fast as the nodes take them, until every write is refused.
"$S" load --nodes $nodes --create --replicated 2 --persisted 1 --batch 100 --message-size 1000 \
    --duration 40s --request-timeout 5s --ledger "$dir/ledger-1" --json > "$dir/load-1.json" 2> "$dir/load-1.err" &
load=$!
refused=0
for _ in $(seq 1 400); do
    refused=$(metric 0 iggy_client_writes_refused_disk_low_total); refused=${refused:-0}
    [ "$refused" -gt 100 ] && break
    sleep 0.1
done
echo "free when writes were refused: $(free_mib 0) / $(free_mib 1) / $(free_mib 2) MiB; node 0 refused $refused writes with 4010 so far"
[ "$refused" -gt 0 ] || { echo "FAIL: no write was refused"; status=1; }
if [ "$reserve" = 0 ]; then
    no_room=0
    for i in 0 1 2; do no_room=$((no_room + $(metric $i iggy_prepares_refused_no_room_total || echo 0))); done
    echo "prepares refused for want of room for a segment: $no_room"
    [ "$no_room" -gt 0 ] || { echo "FAIL: no prepare found the disk full"; status=1; }
fi
readers=$nodes
if [ "$skew" -gt 0 ]; then
    journals=$(metric 2 iggy_journals_refused_no_room_total || echo 0)
    echo "node 2's journal writes refused for want of room: ${journals:-0}"
    [ "${journals:-0}" -gt 0 ] || { echo "FAIL: node 2 journaled everything (no skew?)"; status=1; }
    readers=127.0.0.1:8990,127.0.0.1:8991
fi
# 2. Reads while full: every node serves every partition.
if "$S" verify --nodes $readers --ledger "$dir/ledger-1" --patience 30s > "$dir/verify-full.out" 2>&1; then
    echo "reads while full: $(tail -1 "$dir/verify-full.out")"
else
    echo "FAIL: reads while full: $(tail -1 "$dir/verify-full.out")"; status=1
fi
kill "$load" 2>/dev/null || true; wait "$load" 2>/dev/null || true
# 3. Free the space; writes resume by themselves.
for i in 0 1 2; do rm -f "$dir/disk-$i/ballast"; done
echo "free after the ballast went: $(free_mib 0) / $(free_mib 1) / $(free_mib 2) MiB"
"$S" load --nodes $nodes --replicated 2 --persisted 1 --batch 100 --message-size 1000 --rate 5 \
    --duration 10s --request-timeout 5s --ledger "$dir/ledger-2" --json > "$dir/load-2.json" 2> "$dir/load-2.err" || true
acked=$(grep -o '"batches_acknowledged":[0-9]*' "$dir/load-2.json" | cut -d: -f2)
echo "after freeing: ${acked:-0} batches acknowledged in 10 s ($(grep -o '"errors":{[^}]*}' "$dir/load-2.json" | head -1))"
[ "${acked:-0}" -gt 0 ] || { echo "FAIL: writes did not resume"; status=1; }
for i in 0 1 2; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then echo "node $i: running"; else echo "node $i: EXITED"; status=1; fi
done
# 4. Everything acknowledged, on every node; then the directories.
for n in 1 2; do
    "$S" verify --nodes $nodes --ledger "$dir/ledger-$n" --patience 60s | tail -1 || status=1
done
stop_nodes
for i in 0 1 2; do fsck_node $i "$dir/disk-$i/node-$i" || status=1; done
[ -n "${KEEP:-}" ] && echo "kept: $dir (the file systems are unmounted; the nodes' data went with them)"
exit $status
