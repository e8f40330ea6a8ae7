//! `iggy-inspect`: see the crate docs and `iggy-inspect --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = iggy_inspect::Cli::parse();
    let stdout = std::io::stdout();
    match iggy_inspect::run(&cli, &mut stdout.lock()) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("iggy-inspect: {message}");
            ExitCode::from(8)
        }
    }
}
