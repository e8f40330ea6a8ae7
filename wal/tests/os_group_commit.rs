//! Group commit on the real file system, through the io_uring path where the kernel allows it:
//! a caller that leads a publication wakes the previous publication's callers while the disk
//! works on its own (`write_sync_then_write_sync`'s in-flight work) and may lead several in a
//! row. 64 threads each wait on their own records: every call must return (a lost wakeup
//! hangs here), publications must be shared, and after reopening every acknowledged record is
//! there, unchanged.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use iggy_io::OsStorage;
use iggy_wal::{Config, Mode, Wal};

const THREADS: usize = 64;
const RECORDS_PER_THREAD: usize = 20;

fn config() -> Config {
    Config {
        file_size_bytes: 1 << 20,
        ..Config::new(9)
    }
}

#[test]
fn sixty_four_threads_on_the_real_file_system_share_publications_and_keep_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::open(dir.path()).unwrap();
    if std::env::var_os("IGGY_REQUIRE_IO_URING").is_some() {
        assert!(storage.uses_io_uring(), "io_uring required but unavailable");
    }
    let wal = Arc::new(Wal::create(storage, Path::new("wal"), config(), 1, 0).unwrap());
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (wal, acknowledged) = (Arc::clone(&wal), Arc::clone(&acknowledged));
            std::thread::spawn(move || {
                for round in 0..RECORDS_PER_THREAD {
                    let body = format!("thread {thread} record {round}").into_bytes();
                    let op = wal.append_body(&body, 1, 0).unwrap();
                    let frontier = wal.wait_published(op).unwrap();
                    assert!(
                        frontier.head_op >= op,
                        "returned before op {op} was published"
                    );
                    acknowledged.lock().unwrap().push((op, body));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let publications = wal.published().sequence - 1;
    let acknowledged = Arc::try_unwrap(acknowledged).unwrap().into_inner().unwrap();
    assert_eq!(acknowledged.len(), THREADS * RECORDS_PER_THREAD);
    assert!(
        publications < acknowledged.len() as u64,
        "{publications} publications for {} records",
        acknowledged.len()
    );
    drop(wal);

    let storage = OsStorage::open(dir.path()).unwrap();
    let (wal, report) = Wal::open(storage, Path::new("wal"), config(), Mode::Open)
        .unwrap()
        .unwrap();
    assert_eq!(
        report.discarded_bytes, 0,
        "everything acknowledged was published"
    );
    for (op, body) in &acknowledged {
        assert_eq!(&wal.read(*op, *op).unwrap()[0].body, body, "op {op}");
    }
}
