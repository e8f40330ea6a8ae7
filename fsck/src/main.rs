//! `iggy-fsck`: see the crate docs and `iggy-fsck --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Boot's own WARN lines (what `--repair` discards, rolls back or rewrites) go to stderr,
    // from whichever thread boot opens a group on.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // The handles are passed unlocked: each write takes the stream's lock for itself. A lock
    // held for the whole run would be held while boot's worker threads log their discards to
    // stderr and the main thread joins them: a deadlock on every repair that discards in more
    // than one partition (issue #30).
    let code = iggy_fsck::run(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
        &mut std::io::BufReader::new(std::io::stdin()),
    );
    ExitCode::from(code)
}
