#!/usr/bin/env bash
# The fault harness (issue #45; docs/testing.md, "The fault harness"): a three-node
# `iggy-server dev` cluster of release binaries under `iggy-server load --consumers`, and a seeded
# schedule of faults, one at a time with a pause between them:
#
#   kill       kill -9 of one node, restarted 3 s later
#   kill2      kill -9 of two nodes at once, both restarted 3 s later
#   kill-boot  kill -9 of one node, restarted; 0.3 s later, while it boots, kill -9 of another
#   pause      SIGSTOP of one node for 1 to 8 s, then SIGCONT
#   rolling    a clean restart (SIGTERM, wait, start) of every node in turn
#   partition  one node cut off from both peers, both ways, for 1 to 8 s
#   deaf       one node hears neither peer (what it sends still arrives) for 1 to 8 s
#   mute       nothing one node sends reaches its peers (it still hears them) for 1 to 8 s
#
# The nodes' replica bus runs through `iggy-server proxy` on loopback: node i reaches node j at
# port BASE+3000+3i+j, the proxy's route "i>j", which forwards to node j's replica port and
# carries i's messages to j (each direction of a pair has its own connection). A partition
# blocks routes: nothing crosses, nothing is closed, as across a real network partition.
#
# For each fault it prints the longest write gap any producer saw across it (from the ledger's
# acknowledgment times) beside the bound it should meet: the time fewer than two nodes were up,
# plus detection (a closed connection: at once; a pause or a partition: up to $detect, 2 s: the
# nodes take a peer silent for a second for gone, and a producer moves on from a node that has
# not answered for 2 s, `load --request-timeout`), plus one second. Then it verifies the ledger on every node (every acknowledged message on every
# node, exactly once), prints the consumers' figures, stops the cluster cleanly and runs
# `iggy-fsck` on every node's directory. Exit 0 only if verify and every fsck pass; a gap over
# its bound is printed as OVER (and counted in the last line) but does not fail the run.
#
#   scripts/fault-harness.sh                 # seed 1, 180 s
#   SEED=7 DURATION=1800 RATE=2 scripts/fault-harness.sh   # the long form: 30 minutes
#
# RATE is each producer's batches a second (10 by default: 12 MB/s in all, which every node
# keeps, so 30 minutes at 10 would need 65 GB of disk; RATE=2 needs 13 GB).
#   SHORT=1 scripts/fault-harness.sh         # CI's form: 45 s, three faults (kill, deaf, kill-boot)
#   NOFAULTS=1 DURATION=1800 RATE=2 scripts/fault-harness.sh   # no faults: no view change
#   KINDS="kill-boot kill2" scripts/fault-harness.sh   # only these kinds, drawn at random
#
# Uses ports 8590-8592, 9590-9592, 10590-10592 and 11590-11598 on loopback and a directory
# under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${SEED:-1}
if [ -n "${SHORT:-}" ]; then duration=${DURATION:-45}; else duration=${DURATION:-180}; fi
RANDOM=$seed
cargo build --release -q -p iggy-server -p iggy-fsck
S=$PWD/target/release/iggy-server
F=$PWD/target/release/iggy-fsck
dir=$(mktemp -d /tmp/iggy-faults.XXXXXX)
base=8590
nodes=127.0.0.1:8590,127.0.0.1:8591,127.0.0.1:8592
now_ms() { date +%s%3N; }
source scripts/cluster.sh
# In a subshell, so that the shell does not report each later kill -9 of it as a killed job.
start_node() { ( "$S" run --config "$dir/cluster/node-$1.toml" >> "$dir/node-$1.out" 2>> "$dir/node-$1.err" & ) }
# Every node up and every group of every node with a primary (the nodes' own gauge), or 60 s.
settled() {
    for _ in $(seq 1 600); do
        local ok=1
        for i in 0 1 2; do
            local m
            m=$(metrics $i)
            echo "$m" | grep -q '^iggy_groups_without_primary 0' || ok=0
        done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    echo "the cluster did not settle within 60 s" >&2
}
# Whether process $1 has exited (a node `dev` started stays a zombie until `dev` ends).
gone() { [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ] || ! kill -0 "$1" 2>/dev/null; }
cleanup() {
    for i in 0 1 2; do p=$(pid_of $i); [ -n "$p" ] && kill -CONT $p 2>/dev/null; [ -n "$p" ] && kill $p 2>/dev/null; done
    [ -n "${dev:-}" ] && kill "$dev" 2>/dev/null || true
    [ -n "${proxy:-}" ] && kill "$proxy" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -z "${KEEP:-}" ] && rm -rf "$dir"
    return 0
}
trap cleanup EXIT
# `dev` writes each node's configuration and creates the cluster, and stops its nodes cleanly;
# they start again with their peers' replica addresses moved to the proxy's routes.
write_configs
routes=()
for i in 0 1 2; do
    for j in 0 1 2; do
        [ $i = $j ] && continue
        via=$((base + 3000 + 3 * i + j))
        sed -i "s/^replica = \"127.0.0.1:$((base + 1000 + j))\"/replica = \"127.0.0.1:$via\"/" "$dir/cluster/node-$i.toml"
        routes+=(--route "$i>$j=127.0.0.1:$via>127.0.0.1:$((base + 1000 + j))")
    done
done
: > "$dir/blocked"
"$S" proxy "${routes[@]}" --control "$dir/blocked" 2> "$dir/proxy.err" &
proxy=$!
for i in 0 1 2; do start_node $i; done
for i in 0 1 2; do wait_up $i; done
"$S" load --nodes $nodes --create --replicated 6 --persisted 6 --rate "${RATE:-10}" --batch 100 \
    --message-size 1000 --request-timeout 2s --duration "${duration}s" --consumers --ledger "$dir/ledger" --json \
    > "$dir/load.json" 2> "$dir/load.err" &
load=$!
started=$(now_ms)
end=$((started + duration * 1000 - 15000))
: > "$dir/faults"
# One fault: its kind, when it began and ended, and for how long fewer than two nodes were up
# (and the detection the bound allows), appended to $dir/faults.
record() { echo "$1 $2 $(now_ms) $3 $4" >> "$dir/faults"; }
# The detection a pause or a partition is allowed (see the top).
detect=2000
if [ -n "${SHORT:-}" ]; then default_kinds="kill deaf kill-boot"; else default_kinds="kill kill2 kill-boot pause rolling partition deaf mute"; fi
read -r -a kinds <<< "${KINDS:-$default_kinds}"
count=0
sleep 8
settled
# Each node's view changes before the faults: the load's start, after the nodes' restart through
# the proxy (every replica boots recovering; a group whose replicas all did changes view once).
before=()
for i in 0 1 2; do
    before+=("$(metrics $i | awk '/^iggy_view_changes_total / { print $2 }')")
done
while [ -z "${NOFAULTS:-}" ] && [ "$(now_ms)" -lt "$end" ]; do
    if [ -n "${SHORT:-}" ]; then kind=${kinds[$((count % 3))]}; else kind=${kinds[$((RANDOM % ${#kinds[@]}))]}; fi
    a=$((RANDOM % 3)); b=$(((a + 1 + RANDOM % 2) % 3))
    t0=$(now_ms)
    case $kind in
        kill)
            kill -9 "$(pid_of $a)"; sleep 3; start_node $a; wait_up $a
            record "$kind:$a" "$t0" 0 100 ;;
        kill2)
            kill -9 "$(pid_of $a)" "$(pid_of $b)"; sleep 3; start_node $a; start_node $b
            wait_up $a; t1=$(now_ms); wait_up $b
            record "$kind:$a,$b" "$t0" $((t1 - t0)) 100 ;;
        kill-boot)
            kill -9 "$(pid_of $a)"; sleep 2; start_node $a; sleep 0.3; t1=$(now_ms)
            kill -9 "$(pid_of $b)"; wait_up $a; t2=$(now_ms); sleep 2; start_node $b; wait_up $b
            record "$kind:$a,$b" "$t0" $((t2 - t1)) 100 ;;
        pause)
            ms=$((1000 + RANDOM % 7000)); kill -STOP "$(pid_of $a)"
            sleep "$(awk -v m=$ms 'BEGIN { printf "%.3f", m / 1000 }')"; kill -CONT "$(pid_of $a)"
            record "$kind:$a:${ms}ms" "$t0" 0 $((ms < detect ? ms : detect)) ;;
        partition|deaf|mute)
            ms=$((1000 + RANDOM % 7000)); o=(); for i in 0 1 2; do [ $i != $a ] && o+=($i); done
            case $kind in
                partition) echo "$a>${o[0]} $a>${o[1]} ${o[0]}>$a ${o[1]}>$a" > "$dir/blocked" ;;
                deaf) echo "${o[0]}>$a ${o[1]}>$a" > "$dir/blocked" ;;
                mute) echo "$a>${o[0]} $a>${o[1]}" > "$dir/blocked" ;;
            esac
            sleep "$(awk -v m=$ms 'BEGIN { printf "%.3f", m / 1000 }')"; : > "$dir/blocked"
            record "$kind:$a:${ms}ms" "$t0" 0 $((ms < detect ? ms : detect)) ;;
        rolling)
            for i in 0 1 2; do
                p=$(pid_of $i); kill "$p"; until gone "$p"; do sleep 0.05; done
                start_node $i; wait_up $i; sleep 1
            done
            record "$kind" "$t0" 0 100 ;;
    esac
    count=$((count + 1))
    # The next fault only once the cluster recovered from this one (each fault's gap is its own).
    settled
    # Each node's metrics after each fault, for a look at its replicas' events (KEEP=1).
    for i in 0 1 2; do
        metrics $i > "$dir/metrics-$i.after-$count"
    done
    sleep $((3 + RANDOM % 4))
done
wait "$load" || true
# Views the replicas entered over the run (a fault-free run must count none).
# Each node's metrics are kept beside its logs (with KEEP=1, for a look at its replicas' events).
for i in 0 1 2; do
    metrics $i > "$dir/metrics-$i"
    v=$(awk '/^iggy_view_changes_total / { print $2 }' "$dir/metrics-$i")
    if [ -n "${NOFAULTS:-}" ]; then
        echo "node $i: $(( ${v:-0} - ${before[$i]:-0} )) view changes during the load (${v:-?} since its start)"
    else
        echo "node $i: ${v:-?} view changes since its last start"
    fi
done
echo "load: $(cat "$dir/load.json")"
grep -a "consumers read" "$dir/load.err" || true
# What a reconnect cost a consumer: the most messages it read again in a row (issue #45 bounds
# it by one poll's count, 1,000 messages).
again=$(grep -o '"reread_at_once":[0-9]*' "$dir/load.json" | cut -d: -f2)
echo "consumers: at most ${again:-?} messages read again in a row (one poll: 1000): $([ "${again:-0}" -le 1000 ] && echo ok || echo OVER)"
# Per fault: the longest interval between two consecutive acknowledgments of one producer that
# overlaps the fault (from its start to 1 s after its end), over every producer.
awk -v faults="$dir/faults" '
    BEGIN { while ((getline line < faults) > 0) { n++; split(line, f, " "); kind[n] = f[1]; s[n] = f[2]; e[n] = f[3]; down[n] = f[4]; det[n] = f[5] } }
    /"outcome":"ack"/ && /"at_ms"/ {
        match($0, /"producer":[0-9]+/); p = substr($0, RSTART + 11, RLENGTH - 11)
        match($0, /"at_ms":[0-9]+/); t = substr($0, RSTART + 8, RLENGTH - 8) + 0
        if (p in last) for (i = 1; i <= n; i++) if (t > s[i] && last[p] < e[i] + 1000) { g = t - last[p]; if (g > gap[i]) gap[i] = g }
        last[p] = t
    }
    END {
        over = 0
        for (i = 1; i <= n; i++) {
            bound = down[i] + det[i] + 1000
            verdict = gap[i] <= bound ? "ok" : "OVER"; if (verdict == "OVER") over++
            printf "fault %-16s at +%5.1f s, %5.1f s long: longest write gap %6d ms, bound %6d ms (fewer than two up %d ms): %s\n", kind[i], (s[i] - '"$started"') / 1000, (e[i] - s[i]) / 1000, gap[i], bound, down[i], verdict
        }
        printf "%d faults, %d over their bound\n", n, over
    }' "$dir/ledger"
status=0
"$S" verify --nodes $nodes --ledger "$dir/ledger" --patience 60s | tail -1 || status=1
stop_nodes
kill "$proxy" 2>/dev/null || true
wait 2>/dev/null || true
for i in 0 1 2; do fsck_node $i "$dir/cluster/node-$i" || status=1; done
[ -n "${KEEP:-}" ] && echo "kept: $dir"
exit $status
