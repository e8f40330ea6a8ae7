#!/usr/bin/env bash
# Throughput of the cluster as processes on loopback (docs/benchmarks.md, "The cluster as
# processes"): one node and three, replicated and persisted, three producers in a closed loop of
# 1000-byte messages in batches of 250 for 10 s, each load verified on every node. Beside each
# load's report: the CPU the nodes and the load generator spent per acknowledged message (utime +
# stime from /proc, the nodes' summed) and the bytes the nodes wrote to storage
# (/proc/PID/io write_bytes) per acknowledged payload byte. Ends with `iggy-bench disk`, the
# disk's own floor in the same session.
#
#   scripts/throughput-processes.sh [SECONDS]      # default 10
#
# Uses ports 8490-8492, 9490-9492 and 10490-10492 on loopback and a directory under /tmp.
set -euo pipefail
seconds=${1:-10}
cd "$(dirname "$0")/.."
cargo build --release -q -p iggy-server -p iggy-benches --bin iggy-bench
S=target/release/iggy-server
# shellcheck source=cluster.sh
. scripts/cluster.sh
tick=$(getconf CLK_TCK)
top=$(mktemp -d /tmp/iggy-throughput.XXXXXX)
dev=""
cleanup() {
    [ -n "$dev" ] && kill "$dev" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$top"
}
trap cleanup EXIT

written() {
    local sum=0 pid
    for pid in "$@"; do
        sum=$((sum + $(awk '/^write_bytes/ {print $2}' "/proc/$pid/io")))
    done
    echo "$sum"
}

run_case() {
    local nodes=$1 durability=$2
    local dir="$top/$nodes-$durability"
    mkdir -p "$dir"
    $S dev --nodes "$nodes" --dir "$dir/cluster" --base-port 8490 > "$dir/dev.out" 2> "$dir/dev.err" &
    dev=$!
    for _ in $(seq 1 600); do grep -q "^try:" "$dir/dev.out" 2>/dev/null && break; sleep 0.1; done
    local addresses pids
    addresses=$(seq 0 $((nodes - 1)) | sed 's/^/127.0.0.1:849/' | paste -sd, -)
    pids=$(pgrep -f "$dir/cluster/node-[0-9]*.toml" | paste -sd' ' -)
    local replicated=3 persisted=0
    [ "$durability" = persisted ] && { replicated=0; persisted=3; }
    local cpu_before written_before
    cpu_before=$(cpu_ticks $pids)
    written_before=$(written $pids)
    TIMEFORMAT='%U %S'
    { time $S load --nodes "$addresses" --create --stream tp --replicated $replicated \
        --persisted $persisted --batch 250 --message-size 1000 --duration "${seconds}s" \
        --ledger "$dir/load.ledger" --json > "$dir/load.json"; } 2> "$dir/load.time"
    local cpu_after written_after
    cpu_after=$(cpu_ticks $pids)
    written_after=$(written $pids)
    local messages
    messages=$(grep -o '"messages_acknowledged":[0-9]*' "$dir/load.json" | cut -d: -f2)
    echo "$nodes node(s), $durability: $(cat "$dir/load.json")"
    echo "  $($S verify --nodes "$addresses" --ledger "$dir/load.ledger" --patience 60s | tail -1)"
    awk -v nodes_ticks=$((cpu_after - cpu_before)) -v tick="$tick" -v m="$messages" \
        -v disk=$((written_after - written_before)) -v load="$(cat "$dir/load.time")" 'BEGIN {
            split(load, l, " ")
            printf "  CPU per message: nodes %.1f us, load %.1f us; nodes wrote %.2f bytes to storage per payload byte\n",
                nodes_ticks / tick * 1e6 / m, (l[1] + l[2]) * 1e6 / m, disk / (m * 1000)
        }'
    kill "$dev"
    wait "$dev" 2>/dev/null || true
    dev=""
}

run_case 1 replicated
run_case 3 replicated
run_case 1 persisted
run_case 3 persisted
target/release/iggy-bench disk
