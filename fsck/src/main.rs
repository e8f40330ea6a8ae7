//! `iggy-fsck`: see the crate docs and `iggy-fsck --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = iggy_fsck::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
        &mut std::io::stdin().lock(),
    );
    ExitCode::from(code)
}
