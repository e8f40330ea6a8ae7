#!/usr/bin/env bash
# An alternating A/B of two (or more) builds of `iggy-server` on one node: for each round and
# each build in turn, a fresh `dev --nodes 1` on an empty directory, then the same `load` (three
# closed-loop producers, 1000-byte messages in batches of 250, replicated durability) followed by
# its read-back (`--consumers --consume-after`: consumers polling `Next` with auto-commit, as the
# SDK's do). Prints per load the write and read MB/s and the node's CPU (utime + stime from
# /proc) per message, each message counted once written and once read (docs/benchmarks.md,
# "Session 61: the offset store of two slots").
#
#   scripts/ab-readback.sh ROUNDS SECONDS BIN_A [BIN_B...]
#
# The first build drives every load, so the driver is the same for all. Uses ports 8690, 9690
# and 10690 on loopback and directories under /tmp, removed as it goes.
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,13p' "$0" >&2
    exit 2
fi
rounds=$1
seconds=$2
shift 2
driver=$1
tick=$(getconf CLK_TCK)
dir=""
dev=""
cleanup() {
    if [ -n "$dev" ]; then kill -INT "$dev" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    if [ -n "$dir" ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT

cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}

for round in $(seq 1 "$rounds"); do
    for bin in "$@"; do
        dir=$(mktemp -d /tmp/iggy-ab.XXXXXX)
        "$bin" dev --nodes 1 --dir "$dir" --base-port 8690 >"$dir/dev.log" 2>&1 &
        dev=$!
        node=""
        for _ in $(seq 1 200); do
            node=$(pgrep -f "run --config $dir" | head -1 || true)
            if [ -n "$node" ] && grep -q "127.0.0.1:8690" "$dir/dev.log"; then
                break
            fi
            sleep 0.05
        done
        if [ -z "$node" ]; then
            echo "$bin: the node did not start; its log:" >&2
            cat "$dir/dev.log" >&2
            exit 1
        fi
        before=$(cpu_ticks "$node")
        report=$("$driver" load --nodes 127.0.0.1:8690 --create --stream s --replicated 3 \
            --batch 250 --message-size 1000 --duration "${seconds}s" --consumers \
            --consume-after --ledger "$dir/load.ledger" --json 2>"$dir/load.err") || {
            echo "$bin: load failed:" >&2
            cat "$dir/load.err" >&2
            exit 1
        }
        after=$(cpu_ticks "$node")
        kill -INT "$dev"
        wait "$dev" 2>/dev/null || true
        dev=""
        REPORT=$report TICKS=$((after - before)) TICK=$tick python3 - "$round" "$bin" <<'PY'
import json, os, sys
report = json.loads(os.environ["REPORT"])
messages = report["messages_acknowledged"]
cpu_us = int(os.environ["TICKS"]) / int(os.environ["TICK"]) * 1e6
print(f"round {sys.argv[1]} {sys.argv[2]}: write {report['mb_per_s']:.1f} MB/s, "
      f"read {report['consumers']['mb_per_s']:.1f} MB/s, "
      f"node CPU {cpu_us / (2 * messages):.2f} us a message ({messages} messages)")
PY
        rm -rf "$dir"
        dir=""
    done
done
