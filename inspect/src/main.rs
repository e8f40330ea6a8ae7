//! `iggy-inspect`: see the crate docs and `iggy-inspect --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = iggy_inspect::Cli::parse();
    // Unlocked: each write takes stdout's lock for itself, so no lock is held across work that
    // may log or run on other threads (issue #30's deadlock in `iggy-fsck`).
    match iggy_inspect::run(&cli, &mut std::io::stdout()) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("iggy-inspect: {message}");
            ExitCode::from(8)
        }
    }
}
