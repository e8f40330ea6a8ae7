#!/usr/bin/env bash
# The article's failover on real processes (docs/benchmarks.md, "The article's failover on real
# processes"): a three-node `iggy-server dev` cluster, 24 partitions (12 replicated, 12
# persisted) each with a producer at 10 batches/s of 100 x 1000 B, node 0 killed with SIGKILL at
# 15 s and restarted at 25 s, the load's JSON report (each producer's longest write gap and when
# it began), the bytes the restarted node's boot discarded, and verify on every node.
#
#   scripts/failover-processes.sh [spread|no-spread]     # no-spread: node 0 leads every group
#
# Uses ports 8390-8392, 9390-9392 and 10390-10392 on loopback and a directory under /tmp.
set -euo pipefail
mode=${1:-spread}
case $mode in spread) flag="" ;; no-spread) flag="--no-spread" ;; *) echo "usage: $0 [spread|no-spread]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
cargo build --release -q -p iggy-server
S=target/release/iggy-server
dir=$(mktemp -d /tmp/iggy-failover.XXXXXX)
nodes=127.0.0.1:8390,127.0.0.1:8391,127.0.0.1:8392
$S dev --dir "$dir/cluster" --base-port 8390 $flag > "$dir/dev.out" 2> "$dir/dev.err" &
dev=$!
restarted=""
cleanup() {
    [ -n "$restarted" ] && kill "$restarted" 2>/dev/null || true
    kill "$dev" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
# Ready when dev prints its addresses.
for _ in $(seq 1 600); do grep -q "^try:" "$dir/dev.out" 2>/dev/null && break; sleep 0.1; done
$S load --nodes $nodes --create --replicated 12 --persisted 12 --rate 10 --batch 100 \
    --message-size 1000 --duration 40s --ledger "$dir/failover.ledger" --json > "$dir/load.json" &
load=$!
sleep 15
victim=$(pgrep -f "$dir/cluster/node-0.toml")
kill -9 "$victim"
echo "node 0 (pid $victim) killed at 15 s"
sleep 10
$S run --config "$dir/cluster/node-0.toml" > /dev/null 2> "$dir/node-0.err" &
restarted=$!
echo "node 0 restarted at 25 s"
wait "$load"
cat "$dir/load.json"
grep -a "discarded_bytes=" "$dir/node-0.err" | grep -o "discarded_bytes=[0-9]*" \
    | awk -F= '{s+=$2} END {print "boot discarded bytes:", s+0}'
$S verify --nodes $nodes --ledger "$dir/failover.ledger" --patience 60s | tail -1
