#!/usr/bin/env bash
# Our single node beside Apache Iggy's, one driver for both (issue #48; docs/benchmarks.md,
# "Side by side with Apache Iggy"): `iggy-server load` drives each server in turn with the same
# load (3 closed-loop producers, one partition each, 1000-byte messages in batches of 250 over
# TCP on loopback), alternating the order every round, each server fresh on an empty directory.
# Once the producers stop, a consumer per partition reads back what they wrote (`load
# --consumers --consume-after`: polls of 1,000 messages, each message's payload checked) and its
# MB/s is the read figure. Beside each load: the server's CPU (utime + stime from /proc) over the
# writes and the read-back, per acknowledged message. VERIFY=1 also runs `verify` (slow: about
# 30 MB/s) on each server after its load.
#
# The cases, each a pair:
#   unsynced  ours: replicated durability (on one node: journaled, no fsync before the reply)
#             theirs: a topic with no options (no fsync)
#   fsync     ours: persisted durability (an fsync of each batch before its reply)
#             theirs: enforce_fsync, and messages_required_to_save = 1 (an fsync per batch
#             before the reply; `--apache-fsync-every-batch`)
#   flush     theirs only: enforce_fsync at its default thresholds (iggy-bench's
#             --enforce-fsync: an fsync per 1,024 messages or 1 MiB), for scale
#
#   APACHE_IGGY=/work/apache-iggy scripts/side-by-side.sh [ROUNDS] [SECONDS]   # default 3 and 10
#
# APACHE_IGGY is a checkout of apache/iggy with `target/release/iggy-server` built (see
# ../shared/reference/apache-iggy-here.md: cc269ef70, 0.9.0-edge.5). Ours uses ports 8690,
# 9690 and 10690 on loopback, theirs its configured 127.0.0.1:8090 (and its other default
# ports). Directories under /tmp, removed at the end. Prints one line per load and a table of
# the medians and ratios.
set -euo pipefail
rounds=${1:-3}
seconds=${2:-10}
apache=${APACHE_IGGY:-/work/apache-iggy}
if [ ! -x "$apache/target/release/iggy-server" ]; then
    cat >&2 <<EOF
$0: no Apache Iggy server at $apache/target/release/iggy-server.
Build it from a checkout of apache/iggy (about 15 minutes on two cores; needs the Debian
packages libhwloc-dev, libudev-dev and pkg-config):
    RUSTFLAGS=--cap-lints=warn cargo build --release -p server --bin iggy-server
and point APACHE_IGGY at the checkout.
EOF
    exit 2
fi
cd "$(dirname "$0")/.."
cargo build --release -q -p iggy-server
S=$PWD/target/release/iggy-server
# shellcheck source=cluster.sh
. scripts/cluster.sh
tick=$(getconf CLK_TCK)
top=$(mktemp -d /tmp/iggy-side.XXXXXX)
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$top"
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 1 300); do
        (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
        sleep 0.1
    done
    echo "$0: nothing listens on 127.0.0.1:$1 after 30 s" >&2
    return 1
}

# run_one SERVER CASE ROUND: starts SERVER (ours or theirs) fresh, runs the load and its
# read-back, stops the server; appends a line "server case round mb_per_s p50_us p99_us
# cpu_us_per_message read_mb_per_s check" to $top/results.
run_one() {
    local who=$1 case=$2 round=$3
    local dir="$top/$who-$case-$round"
    mkdir -p "$dir"
    local address topic_flags=()
    if [ "$who" = ours ]; then
        address=127.0.0.1:8690
        $S dev --nodes 1 --dir "$dir/data" --base-port 8690 > "$dir/server.out" 2> "$dir/server.err" &
        server=$!
        for _ in $(seq 1 600); do grep -q "^try:" "$dir/server.out" 2>/dev/null && break; sleep 0.1; done
        # The node is dev's child: its CPU is what the load costs.
        local pid
        pid=$(pgrep -f "$dir/data/node-0.toml")
        case $case in
            unsynced) topic_flags=(--replicated 3) ;;
            fsync) topic_flags=(--persisted 3 --replicated 0) ;;
        esac
    else
        address=127.0.0.1:8090
        (cd "$apache" && IGGY_SYSTEM_PATH="$dir/data" exec target/release/iggy-server --fresh \
            --with-default-root-credentials > "$dir/server.out" 2> "$dir/server.err") &
        server=$!
        wait_port 8090
        local pid=$server
        case $case in
            unsynced) topic_flags=(--replicated 3 --apache-iggy) ;;
            fsync) topic_flags=(--persisted 3 --replicated 0 --apache-iggy --apache-fsync-every-batch) ;;
            flush) topic_flags=(--persisted 3 --replicated 0 --apache-iggy) ;;
        esac
    fi
    wait_port "${address##*:}"
    local before after
    before=$(cpu_ticks "$pid")
    $S load --nodes "$address" --create --stream side "${topic_flags[@]}" --batch 250 \
        --message-size 1000 --duration "${seconds}s" --consumers --consume-after \
        --ledger "$dir/load.ledger" --json > "$dir/load.json" 2> "$dir/load.err"
    after=$(cpu_ticks "$pid")
    local checked=clean
    if [ -n "${VERIFY:-}" ]; then
        $S verify --nodes "$address" --ledger "$dir/load.ledger" --patience 60s > "$dir/verify.out" 2>&1 \
            || checked=FAILED
    fi
    kill "$server"
    wait "$server" 2> /dev/null || true
    server=""
    local json
    json=$(cat "$dir/load.json")
    # The first occurrence is the producers' (the consumers' report comes after).
    field() { echo "$json" | grep -o "\"$1\":[0-9.]*" | sed -n "${2:-1}p" | cut -d: -f2; }
    local messages
    messages=$(field messages_acknowledged)
    # The read-back is clean when every consumer read through its producer's last acknowledged
    # message and found nothing skipped, damaged, missed or read twice.
    if [ "$(field caught_up)" != 3 ] || [ "$(field skipped)$(field damaged)$(field missed)$(field reread)" != 0000 ]; then
        checked=FAILED
    fi
    awk -v who="$who" -v case="$case" -v round="$round" -v mb="$(field mb_per_s)" \
        -v p50="$(field p50_us)" -v p99="$(field p99_us)" -v m="$messages" \
        -v ticks=$((after - before)) -v tick="$tick" -v read="$(field mb_per_s 2)" -v checked="$checked" 'BEGIN {
            printf "%s %s %s %.1f %d %d %.2f %.1f %s\n", who, case, round, mb, p50, p99,
                ticks / tick * 1e6 / m, read, checked
        }' | tee -a "$top/results"
    rm -rf "$dir/data"
}

echo "server case round MB/s p50_us p99_us cpu_us/msg read_MB/s check"
for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order="ours theirs"; else order="theirs ours"; fi
    for case in unsynced fsync; do
        for who in $order; do run_one "$who" "$case" "$round"; done
    done
    run_one theirs flush "$round"
done

# Medians per (server, case), then the ratios ours / theirs with their spread across rounds.
echo
echo "median of $rounds rounds (write MB/s and its range, p99 ms, server CPU us a message, read MB/s):"
# The median of each column on its own (the round of the median write is not that of the
# median read).
awk '{ print $1 " " $2 }' "$top/results" | sort -u | while read -r who case; do
    median() {
        awk -v who="$who" -v case="$case" -v col="$1" '$1 == who && $2 == case { print $col }' \
            "$top/results" | sort -n | awk '{ v[NR] = $1 } END { printf "%s %s %s", v[int((NR + 1) / 2)], v[1], v[NR] }'
    }
    read -r mb low high <<< "$(median 4)"
    read -r p99 _ _ <<< "$(median 6)"
    read -r cpu _ _ <<< "$(median 7)"
    read -r rd _ _ <<< "$(median 8)"
    awk -v key="$who $case" -v mb="$mb" -v low="$low" -v high="$high" -v p99="$p99" -v cpu="$cpu" -v rd="$rd" \
        'BEGIN { printf "  %-16s write %7.1f MB/s (%.1f to %.1f)  p99 %5.1f ms  cpu %.2f us  read %7.1f MB/s\n", key, mb, low, high, p99 / 1000, cpu, rd }'
done
awk '
    { w[$1, $2, $3] = $4; r[$1, $2, $3] = $8 }
    END {
        for (pair = 1; pair <= 2; pair++) {
            c = pair == 1 ? "unsynced" : "fsync"
            line = ""; rline = ""
            for (n = 1; w["ours", c, n] != ""; n++)
                if (w["theirs", c, n] > 0 && r["theirs", c, n] > 0) {
                    line = line sprintf(" %.2f", w["ours", c, n] / w["theirs", c, n])
                    rline = rline sprintf(" %.2f", r["ours", c, n] / r["theirs", c, n])
                }
            printf "  ours/theirs, %s, per round: write%s, read%s\n", c, line, rline
        }
    }' "$top/results"
if grep -q FAILED "$top/results"; then
    echo "$0: a read-back or verify failed (above; the loads' reports are under $top)" >&2
    trap - EXIT
    exit 1
fi
