//! `iggy-fsck`: see the crate docs and `iggy-fsck --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Boot's own WARN lines (what `--repair` discards, rolls back or rewrites) go to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = iggy_fsck::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        &mut std::io::stdin().lock(),
    );
    ExitCode::from(code)
}
