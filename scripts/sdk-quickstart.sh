#!/usr/bin/env bash
# The Iggy SDK's README quick start, unchanged SDK (iggy 0.11.0 from the registry), against a
# local cluster of three `iggy-server run` processes (issue #47): an IggyProducer through node 0,
# a consumer group with auto-commit IntervalOrWhen(1s, ConsumingAllMessages) through node 1, a
# second member joining mid-stream, and a kill -9 of node 1 while they read. Every message sent
# must be consumed. Outside the default test run: the SDK takes about three minutes to build
# once (scripts/sdk-quickstart/, not a workspace member).
#
#   MESSAGES=20000 scripts/sdk-quickstart.sh      # exit 0 when nothing sent went unconsumed
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${MESSAGES:-20000}
cargo build --release -q -p iggy-server
(cd scripts/sdk-quickstart && cargo build --release -q)
S=$PWD/target/release/iggy-server
Q=$PWD/scripts/sdk-quickstart/target/release/iggy-sdk-quickstart
dir=$(mktemp -d /tmp/iggy-sdk.XXXXXX)
base=${IGGY_SDK_CHECK_PORT:-8790}
dev=
source scripts/cluster.sh
start_node() { ( "$S" run --config "$dir/cluster/node-$1.toml" >> "$dir/node-$1.out" 2>> "$dir/node-$1.err" & ) }
cleanup() {
    [ -n "$dev" ] && kill -INT "$dev" 2>/dev/null
    stop_nodes
    if [ -z "${KEEP:-}" ]; then rm -rf "$dir"; else echo "kept $dir"; fi
}
trap cleanup EXIT
write_configs --nodes 3
for i in 0 1 2; do start_node $i; done
for i in 0 1 2; do wait_up $i; done
status=0
"$Q" "127.0.0.1:$base" "127.0.0.1:$((base + 1))" "$messages" "$(pid_of 1)" || status=$?
echo "node 1 was killed; what nodes 0 and 2 saw:"
for i in 0 2; do
    metrics $i | grep -E '^iggy_client_(poll_routes|attached_sessions)_total' | sed "s/^/  node $i: /"
done
grep -h "member keeper\|left its consumer groups" "$dir"/node-[02].err | cut -c1-200 | tail -5 || true
exit $status
