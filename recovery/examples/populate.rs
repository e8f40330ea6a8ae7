//! Writes a realistic node directory: `cargo run --example populate -p iggy-recovery -- <dir>`.
//! The directory must not exist or be empty. See `iggy_recovery::populate`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: populate <data-dir>   (writes a node directory there)");
        return ExitCode::from(8);
    };
    let storage = match iggy_io::OsStorage::create(&dir) {
        Ok(storage) => storage,
        Err(error) => {
            eprintln!("populate: {error}");
            return ExitCode::from(8);
        }
    };
    let options = iggy_recovery::populate::Options::default();
    match iggy_recovery::populate::populate(&storage, Path::new(""), &options) {
        Ok(keys) => {
            println!(
                "populated {}: metadata (snapshot + WAL) and {} partitions, each with unpublished tails",
                dir.display(),
                keys.len()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("populate: {error}");
            ExitCode::from(8)
        }
    }
}
