#!/usr/bin/env bash
# The hostile-client suite (issue #46; docs/testing.md, "Hostile clients"): a three-node cluster
# of release binaries under `iggy-server load --consumers`, and beside it `iggy-server hostile`:
# oversized and tiny creates, 100,000 partitions, idle and slow connections on both ports, bodies
# just under max_request_bytes from 50 clients at once, 10,000 wrong passwords, strangers and a
# replayed handshake on the replica bus. Each case must get its documented answer (a status or a
# closed connection) while the load goes on. Then: no node exited, every node's resident memory
# stayed under $RSS_BOUND_MIB (sampled every second), `verify` finds every acknowledged message
# on every node exactly once, and `iggy-fsck` exits 0 on every node's directory.
#
#   scripts/hostile-clients.sh              # the full sizes (about 4 minutes)
#   SHORT=1 scripts/hostile-clients.sh      # CI's form: smaller floods (about 2 minutes)
#   KEEP=1 ...                              # keep the directory (logs, ledger, capture)
#   CASES=big-bodies DURATION=60 ...        # some cases only, beside a shorter load
#
# Node 1's connection to node 0's replica port runs through `iggy-server proxy --capture`, which
# records its handshake for the replay case. Uses ports 8790-8792, 9790-9792, 10790-10792 and
# 11790 on loopback, and a directory under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p iggy-server -p iggy-fsck
S=$PWD/target/release/iggy-server
F=$PWD/target/release/iggy-fsck
dir=$(mktemp -d /tmp/iggy-hostile.XXXXXX)
base=8790
nodes=127.0.0.1:8790,127.0.0.1:8791,127.0.0.1:8792
buses=127.0.0.1:9790,127.0.0.1:9791,127.0.0.1:9792
# Resident memory no node may pass, from its budgets (docs/server.md, "Limits and a full disk"):
# its prepare rings (ring_budget_bytes, 1 GiB), its own request bodies (in_flight_bytes,
# 256 MiB) and those its two peers forward to it (2 x 256 MiB), its bus queues (2 x 128 MiB),
# the pipelines of the groups it leads (pipeline_budget_bytes, 512 MiB) and the allocator's
# slack besides: 3.5 GiB.
rss_bound_mib=${RSS_BOUND_MIB:-3584}
if [ -n "${SHORT:-}" ]; then duration=100; short=--short; else duration=240; short=; fi
duration=${DURATION:-$duration}
source scripts/cluster.sh
cleanup() {
    for i in 0 1 2; do p=$(pid_of $i); [ -n "$p" ] && kill $p 2>/dev/null; done
    [ -n "${dev:-}" ] && kill "$dev" 2>/dev/null || true
    [ -n "${proxy:-}" ] && kill "$proxy" 2>/dev/null || true
    [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -z "${KEEP:-}" ] && rm -rf "$dir"
    return 0
}
trap cleanup EXIT
write_configs
cluster_id=$(awk -F' *= *' '/^cluster_id/ { gsub(/"/, "", $2); print $2; exit }' "$dir/cluster/node-0.toml")
# Node 1 reaches node 0's replica port through the capturing proxy.
sed -i "s/^replica = \"127.0.0.1:$((base + 1000))\"/replica = \"127.0.0.1:$((base + 3000))\"/" "$dir/cluster/node-1.toml"
: > "$dir/blocked"
"$S" proxy --route "1>0=127.0.0.1:$((base + 3000))>127.0.0.1:$((base + 1000))" \
    --control "$dir/blocked" --capture "$dir" 2> "$dir/proxy.err" &
proxy=$!
for i in 0 1 2; do ( "$S" run --config "$dir/cluster/node-$i.toml" >> "$dir/node-$i.out" 2>> "$dir/node-$i.err" & ); done
for i in 0 1 2; do wait_up $i; done
pids=(); for i in 0 1 2; do pids+=("$(pid_of $i)"); done
# Every second, each node's resident memory (KiB), one line per sample.
( while true; do
    line=""
    for p in "${pids[@]}"; do line="$line $(awk '/^VmRSS/ { print $2 }' /proc/$p/status 2>/dev/null || echo 0)"; done
    echo "$line" >> "$dir/rss"
    sleep 1
  done ) &
sampler=$!
"$S" load --nodes $nodes --create --replicated 3 --persisted 3 --rate 10 --batch 100 \
    --message-size 1000 --request-timeout 5s --duration "${duration}s" --consumers --ledger "$dir/ledger" --json \
    > "$dir/load.json" 2> "$dir/load.err" &
load=$!
sleep 5
status=0
for _ in $(seq 1 100); do [ -s "$dir/1>0.up" ] && break; sleep 0.1; done
"$S" hostile --nodes $nodes --buses $buses --cluster-id "$cluster_id" $short \
    --replay "$dir/1>0.up@127.0.0.1:$((base + 1000))" ${CASES:+--cases "$CASES"} | tee "$dir/hostile.out" || status=1
wait "$load" || true
echo "load: $(cat "$dir/load.json")"
kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=
for i in 0 1 2; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then echo "node $i: running"; else echo "node $i: EXITED"; status=1; fi
done
max=$(awk '{ for (i = 1; i <= NF; i++) if ($i > m) m = $i } END { print int(m / 1024) }' "$dir/rss")
echo "largest resident memory of a node: $max MiB (bound $rss_bound_mib MiB): $([ "$max" -le "$rss_bound_mib" ] && echo ok || echo OVER)"
[ "$max" -le "$rss_bound_mib" ] || status=1
"$S" verify --nodes $nodes --ledger "$dir/ledger" --patience 60s | tail -1 || status=1
stop_nodes
kill "$proxy" 2>/dev/null || true
wait 2>/dev/null || true
for i in 0 1 2; do fsck_node $i "$dir/cluster/node-$i" || status=1; done
[ -n "${KEEP:-}" ] && echo "kept: $dir"
exit $status
