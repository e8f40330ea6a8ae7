//! Accepting connections without spinning: a listener whose `accept` fails (`EMFILE`, `ENFILE`:
//! the process or the system is out of descriptors) is asked again after a pause that grows to
//! a second, with one WARN line per run of failures, instead of at once in a loop that takes a
//! core and starves the node's other tasks.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The next connection of `listener` (`what` names the port in the log line).
pub async fn accept(listener: &TcpListener, what: &str) -> (TcpStream, SocketAddr) {
    let mut pause = Duration::from_millis(10);
    let mut failures = 0u64;
    loop {
        match listener.accept().await {
            Ok(accepted) => {
                if failures > 0 {
                    tracing::info!(port = what, failures, "accepting connections again");
                }
                return accepted;
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(port = what, error = %e, "cannot accept a connection (out of descriptors?); retrying with backoff");
                }
                failures += 1;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// TCP keepalive on a connection: probed after 30 s of silence, every 10 s, given up after 3
/// unanswered probes. A peer or client whose machine vanished (power, a cable) sends no FIN; its
/// connection, and what it holds, is released in about a minute rather than kept for good.
pub fn keepalive(stream: &TcpStream) {
    use rustix::net::sockopt;
    let _ = sockopt::set_socket_keepalive(stream, true);
    let _ = sockopt::set_tcp_keepidle(stream, Duration::from_secs(30));
    let _ = sockopt::set_tcp_keepintvl(stream, Duration::from_secs(10));
    let _ = sockopt::set_tcp_keepcnt(stream, 3);
}

/// Raises the soft limit on open descriptors to the hard one: every partition holds files open
/// and every client a socket, and the usual soft limit of 1,024 runs out at about a thousand
/// idle connections (the accept loops back off then, [`accept`]).
pub fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return limit.current;
    }
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!(
                from = ?limit.current,
                to = ?limit.maximum,
                "raised the open-descriptor limit"
            );
            limit.maximum
        }
        Err(e) => {
            tracing::warn!(error = %e, current = ?limit.current, "cannot raise the open-descriptor limit");
            limit.current
        }
    }
}
