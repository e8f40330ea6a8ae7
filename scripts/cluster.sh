# Helpers the cluster scripts share (sourced by fault-harness.sh, hostile-clients.sh,
# full-disk.sh, and for `cpu_ticks` by throughput-processes.sh and side-by-side.sh): three nodes configured by `iggy-server dev` under $dir/cluster on ports from
# $base (clients $base+i, replica bus $base+1000+i, metrics $base+2000+i), each run as its own
# process by `iggy-server run`. The sourcing script sets $S (the server binary), $dir and $base.

# The pid of node $1's process (empty when it is not running).
pid_of() { pgrep -f "$dir/cluster/node-$1.toml" || true; }
# Whether node $1's client port accepts a connection.
up() { (exec 3<>"/dev/tcp/127.0.0.1/$((base + $1))") 2>/dev/null; }
wait_up() { for _ in $(seq 1 600); do up "$1" && return 0; sleep 0.05; done; echo "node $1 did not come up" >&2; return 1; }
# Clock ticks of user and system time of the processes named, summed (`getconf CLK_TCK` a
# second). Needs neither $dir nor $base (throughput-processes.sh and side-by-side.sh).
cpu_ticks() {
    local sum=0 pid
    for pid in "$@"; do
        # Fields after the command name's closing parenthesis: utime is the 12th, stime the 13th.
        sum=$((sum + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
    done
    echo "$sum"
}
# Node $1's metrics page (empty when it does not answer).
metrics() { (exec 3<>"/dev/tcp/127.0.0.1/$((base + 2000 + $1))" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null || true; }
# Writes each node's configuration and creates the cluster with `dev` (extra arguments go to
# it), then stops it cleanly: the script starts the nodes itself, after changing what it needs.
# $dev names the `dev` process meanwhile, for the script's cleanup.
write_configs() {
    "$S" dev --dir "$dir/cluster" --base-port "$base" "$@" > "$dir/dev.out" 2> "$dir/dev.err" &
    dev=$!
    for _ in $(seq 1 600); do grep -q "^try:" "$dir/dev.out" 2>/dev/null && break; sleep 0.1; done
    kill -INT "$dev"; wait "$dev" || true; dev=
}
# Stops nodes 0 to 2 cleanly (SIGTERM) and waits until each process has exited: they run
# detached from the script, so `wait` does not see them.
stop_nodes() {
    local pids=() p
    for i in 0 1 2; do p=$(pid_of $i); [ -n "$p" ] && pids+=($p) && kill $p 2>/dev/null; done
    for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done
}
# Runs iggy-fsck ($F) on node $1's directory $2, prints its verdict; fails with it.
fsck_node() {
    if "$F" "$2" > "$dir/fsck-$1.out" 2>&1; then echo "iggy-fsck node-$1: exit 0"
    else local code=$?; echo "iggy-fsck node-$1: exit $code ($(tail -1 "$dir/fsck-$1.out"))"; return 1; fi
}
