#!/usr/bin/env bash
# The article's failover on real processes (docs/benchmarks.md, "The article's failover on real
# processes"): a three-node `iggy-server dev` cluster, 24 partitions (12 replicated, 12
# persisted) each with a producer at 10 batches/s of 100 x 1000 B, node 0 killed with SIGKILL at
# 15 s and restarted at 25 s, the load's JSON report (each producer's longest write gap and when
# it began), each group's election (from the kill to its new primary's "view change done" log
# line, and the view change's own length), the bytes the restarted node's boot discarded and its
# repair fetched (the survivors' iggy_repair_sent_bytes_total{to="0"}), and verify on every node.
#
#   scripts/failover-processes.sh [spread|no-spread]     # no-spread: node 0 leads every group
#   RATE=10 BATCH=250 scripts/failover-processes.sh no-spread   # batches/s and messages a batch
#
# Uses ports 8390-8392, 9390-9392 and 10390-10392 on loopback and a directory under /tmp.
set -euo pipefail
[ -n "${TRACE:-}" ] && set -x
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
$S load --nodes $nodes --create --replicated 12 --persisted 12 --rate "${RATE:-10}" --batch "${BATCH:-100}" \
    --message-size 1000 --duration 40s --ledger "$dir/failover.ledger" --json > "$dir/load.json" &
load=$!
sleep 15
victim=$(pgrep -f "$dir/cluster/node-0.toml")
killed_ms=$(date +%s%3N)
kill -9 "$victim"
echo "node 0 (pid $victim) killed at 15 s"
sleep 10
$S run --config "$dir/cluster/node-0.toml" > /dev/null 2> "$dir/node-0.err" &
restarted=$!
echo "node 0 restarted at 25 s"
wait "$load"
cat "$dir/load.json"
# Each producer's longest write gap across the kill (from the kill to 5 s after it), from the
# ledger's acknowledgment times: the load's own longest gap may be elsewhere (its first batch).
awk -v killed="$killed_ms" '
    /"outcome":"ack"/ && /"at_ms"/ {
        match($0, /"producer":[0-9]+/); p = substr($0, RSTART + 11, RLENGTH - 11)
        match($0, /"at_ms":[0-9]+/); t = substr($0, RSTART + 8, RLENGTH - 8) + 0
        if ((p in last) && t > killed && last[p] < killed + 5000 && t - last[p] > gap[p]) gap[p] = t - last[p]
        last[p] = t
    }
    END {
        n = 0; max = 0
        for (p in gap) { n++; if (gap[p] > max) max = gap[p]; sum += gap[p] }
        if (n) printf "write gap across the kill: %d producers, longest %d ms, mean %d ms\n", n, max, sum / n
    }' "$dir/failover.ledger"
# Elections: per group, the survivors' first "view change done" after the kill (the new
# primary's, which is normal first); dev.err holds the survivors' logs (node 0's first life died).
{ grep -a "view change done" "$dir/dev.err" || true; } | { grep -v " node=0 " || true; } | awk -v killed="$killed_ms" '
    {
        match($0, /group="[^"]*"/); g = substr($0, RSTART, RLENGTH)
        match($0, /at_unix_ms=[0-9]+/); t = substr($0, RSTART + 11, RLENGTH - 11) + 0
        v = -1; if (match($0, /view_change_ms=[0-9.]+/)) v = substr($0, RSTART + 15, RLENGTH - 15) + 0
        if (t >= killed && (!(g in first) || t < first[g])) { first[g] = t; took[g] = v }
    }
    function report(name, class,    n, g, i, j, x, e, c) {
        n = 0
        for (g in first) {
            if (class != "" && kind(g) != class) continue
            n++; e[n] = first[g] - killed; c[n] = took[g]
        }
        if (n == 0) return
        for (i = 2; i <= n; i++) for (j = i; j > 1 && e[j] < e[j-1]; j--) { x = e[j]; e[j] = e[j-1]; e[j-1] = x }
        for (i = 2; i <= n; i++) for (j = i; j > 1 && c[j] < c[j-1]; j--) { x = c[j]; c[j] = c[j-1]; c[j-1] = x }
        printf "elections, %s: %d groups, kill to elected %d/%d/%d ms (min/median/max), the view change itself %.1f/%.1f/%.1f ms\n", name, n, e[1], e[int((n+1)/2)], e[n], c[1], c[int((n+1)/2)], c[n]
    }
    function kind(g) { return g ~ /metadata/ ? "metadata" : g ~ /persisted/ ? "persisted" : "replicated" }
    END {
        if (length(first) == 0) { print "elections: none after the kill"; exit }
        report("all", ""); report("metadata", "metadata"); report("replicated", "replicated"); report("persisted", "persisted")
    }'
# Repair: what the survivors sent node 0 in answer to its repair requests.
scrape() {
    exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    cat <&3 || echo "scraping port $1 failed" >&2
    exec 3<&-
}
# What node 0's boot discarded (its metric; no log line carries it).
scrape 10390 | { grep -a '^iggy_boot_discarded_bytes' || true; } \
    | awk '{s+=$2} END {print "boot discarded bytes:", s+0}'
{ scrape 10391; scrape 10392; } > "$dir/survivors.metrics"
grep -a '^iggy_repair_sent_bytes_total{to="0"}' "$dir/survivors.metrics" \
    | awk '{s+=$2} END {print "repair fetched by node 0:", s+0, "bytes"}'
# KEEP=DIR keeps the logs, the ledger and every node's metrics there (not the data).
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP"
    scrape 10390 > "$KEEP/node-0.metrics"
    cp "$dir"/*.err "$dir"/*.out "$dir"/*.json "$dir"/*.metrics "$dir"/*.ledger "$KEEP"/
fi
grep -a '^iggy_bus_dropped_total' "$dir/survivors.metrics" \
    | awk '{s+=$2} END {print "messages the survivors dropped on a full peer queue:", s+0}'
$S verify --nodes $nodes --ledger "$dir/failover.ledger" --patience 60s | tail -1
