//! `iggy-server proxy`: a TCP proxy on loopback for the fault harness's network partitions
//! (`scripts/fault-harness.sh`, `docs/testing.md`). Each *route* listens on one address and
//! forwards every connection to a target; a route can be blocked and unblocked while it runs.
//!
//! The harness gives each directed pair of nodes its own route (node `i`'s configuration names
//! the route `i>j` as node `j`'s replica address), so each route carries one direction of the
//! replica bus (the bus sends over the connection the sender dialled) and a one-way partition is
//! one blocked route.
//!
//! A blocked route forwards nothing in either direction and opens no new upstream connection,
//! but closes nothing: as across a real partition, the sender's writes stall once the socket
//! buffers fill, and what was in flight arrives when the route is unblocked. A connection that
//! ends on one side (a node killed) is shut down on the other once its route is open, so a
//! peer's death is seen through the proxy as at once as without it, unless a partition hides it.
//!
//! The routes blocked are the names listed (whitespace-separated) in the control file, read
//! every 10 ms; a missing or empty file blocks nothing.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One route: a name for the control file, where it listens, where it forwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    pub listen: SocketAddr,
    pub target: SocketAddr,
}

impl std::str::FromStr for Route {
    type Err = String;

    /// `NAME=LISTEN>TARGET`, e.g. `0>1=127.0.0.1:11591>127.0.0.1:9591`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, addresses) = text
            .split_once('=')
            .ok_or_else(|| format!("route {text:?}: expected NAME=LISTEN>TARGET"))?;
        let (listen, target) = addresses
            .split_once('>')
            .ok_or_else(|| format!("route {text:?}: expected NAME=LISTEN>TARGET"))?;
        let parse = |what: &str, address: &str| {
            address
                .parse::<SocketAddr>()
                .map_err(|e| format!("route {text:?}: {what} {address:?}: {e}"))
        };
        let route = Self {
            name: name.to_string(),
            listen: parse("listen address", listen)?,
            target: parse("target", target)?,
        };
        if route.name.is_empty() || route.name.contains(char::is_whitespace) {
            return Err(format!("route {text:?}: a name without spaces is needed"));
        }
        if !route.listen.ip().is_loopback() || !route.target.ip().is_loopback() {
            return Err(format!(
                "route {text:?}: the proxy is for loopback tests: both addresses must be loopback"
            ));
        }
        Ok(route)
    }
}

/// How often a blocked direction looks again, and the control file is read.
const POLL: Duration = Duration::from_millis(10);

async fn open(gate: &AtomicBool) {
    while gate.load(Ordering::Acquire) {
        tokio::time::sleep(POLL).await;
    }
}

/// Copies `from` to `to` while the route is open; at the end of `from`, shuts `to` down.
/// How many bytes of a route's first connection `--capture` keeps: a bus handshake's hello
/// and confirmation.
const CAPTURE_BYTES: usize = 160;

/// Writes a capture (a test's file, not a node's: no `Storage`).
#[allow(clippy::disallowed_methods)]
fn write_capture(path: &PathBuf, bytes: &[u8]) {
    if let Err(e) = std::fs::write(path, bytes) {
        eprintln!("iggy-server proxy: writing {}: {e}", path.display());
    }
}

/// Copies `from` to `to` while the route is open; at the end of `from`, shuts `to` down. With
/// `capture`, the first [`CAPTURE_BYTES`] copied are written to that file.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blocked: Arc<AtomicBool>,
    mut capture: Option<(PathBuf, Vec<u8>)>,
) {
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        open(&blocked).await;
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((path, kept)) = &mut capture {
            let take = n.min(CAPTURE_BYTES - kept.len());
            kept.extend_from_slice(&buffer[..take]);
            if kept.len() == CAPTURE_BYTES {
                write_capture(path, kept);
                capture = None;
            }
        }
        // What was read before a block goes out after it.
        open(&blocked).await;
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    open(&blocked).await;
    let _ = to.shutdown().await;
}

async fn serve(
    route: Route,
    listener: TcpListener,
    blocked: Arc<AtomicBool>,
    capture: Option<PathBuf>,
) {
    // Taken by the first connection whose target answers (one made while the target was
    // down carries no handshake).
    let capture = Arc::new(std::sync::Mutex::new(
        capture.map(|dir| dir.join(format!("{}.up", route.name))),
    ));
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let blocked = Arc::clone(&blocked);
        let route = route.clone();
        let capture = Arc::clone(&capture);
        tokio::spawn(async move {
            // Across a partition no connection is made: the dialler waits, as for a SYN
            // that gets no answer.
            open(&blocked).await;
            let Ok(outbound) = TcpStream::connect(route.target).await else {
                return; // the target is down: the dialler sees its connection end
            };
            let capture = capture
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
                .map(|path| (path, Vec::new()));
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            let up = tokio::spawn(pipe(in_read, out_write, Arc::clone(&blocked), capture));
            let down = tokio::spawn(pipe(out_read, in_write, blocked, None));
            let _ = up.await;
            let _ = down.await;
        });
    }
}

/// The blocked names in the control file (none when it is missing). A small file the harness
/// writes, not a durable file of a node: no `Storage`.
#[allow(clippy::disallowed_methods)]
fn read_blocked(control: &PathBuf) -> BTreeSet<String> {
    std::fs::read_to_string(control)
        .map(|text| text.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Runs the routes until the process is stopped. Fails only when a route cannot listen.
pub fn run(routes: Vec<Route>, control: PathBuf, capture: Option<PathBuf>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime: {e}"))?;
    runtime.block_on(async move {
        let mut gates = Vec::new();
        for route in routes {
            let listener = TcpListener::bind(route.listen)
                .await
                .map_err(|e| format!("route {}: listen on {}: {e}", route.name, route.listen))?;
            let blocked = Arc::new(AtomicBool::new(false));
            gates.push((route.name.clone(), Arc::clone(&blocked)));
            tokio::spawn(serve(route, listener, blocked, capture.clone()));
        }
        eprintln!(
            "iggy-server proxy: {} routes, blocked ones read from {}",
            gates.len(),
            control.display()
        );
        let mut last = BTreeSet::new();
        loop {
            let now = read_blocked(&control);
            if now != last {
                for (name, gate) in &gates {
                    gate.store(now.contains(name), Ordering::Release);
                }
                let names: Vec<&str> = now.iter().map(String::as_str).collect();
                eprintln!("iggy-server proxy: blocked [{}]", names.join(" "));
                last = now;
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_parses_and_refuses_what_is_not_loopback() {
        let route: Route = "0>1=127.0.0.1:11591>127.0.0.1:9591".parse().unwrap();
        assert_eq!(route.name, "0>1");
        assert_eq!(route.listen.port(), 11591);
        assert_eq!(route.target.port(), 9591);
        assert!("0>1=10.0.0.1:1>127.0.0.1:2".parse::<Route>().is_err());
        assert!("127.0.0.1:1>127.0.0.1:2".parse::<Route>().is_err());
        assert!("a b=127.0.0.1:1>127.0.0.1:2".parse::<Route>().is_err());
    }
}
