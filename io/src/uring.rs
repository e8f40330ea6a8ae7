//! The io_uring path of `OsStorage`: a write and an `fdatasync` linked in one submission
//! (`IOSQE_IO_LINK`: the sync starts only after the write completed in full), one system call
//! instead of two. Used when the kernel allows io_uring; `OsStorage` falls back to plain system
//! calls otherwise (and when asked to, for tests of both paths).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Mutex;

use io_uring::{IoUring, opcode, squeue, types};

/// One ring shared by the files of an `OsStorage` (durable appends are serialized by their
/// callers anyway: one publication at a time).
pub(crate) struct Ring {
    ring: Mutex<IoUring>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ring")
    }
}

/// What the kernel reported for the two linked operations (negative: `-errno`).
pub(crate) struct Outcome {
    pub write: i32,
    pub sync: i32,
}

impl Ring {
    /// A ring, or `None` where the kernel (or a sandbox) does not allow io_uring.
    pub(crate) fn new() -> Option<Self> {
        IoUring::new(8).ok().map(|ring| Self {
            ring: Mutex::new(ring),
        })
    }

    /// Writes `buf` at `offset` of `fd`, then `fdatasync`s it, as one linked submission, and
    /// waits for both completions. A short write breaks the link: the sync then reports
    /// `-ECANCELED` and the caller completes the rest with system calls.
    pub(crate) fn write_and_sync(&self, fd: BorrowedFd<'_>, offset: u64, buf: &[u8]) -> Outcome {
        let fd = types::Fd(fd.as_raw_fd());
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let write = opcode::Write::new(fd, buf.as_ptr(), len)
            .offset(offset)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(0);
        let sync = opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(1);
        let mut ring = self
            .ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: the entries point into `buf`, which outlives this call, and this function does
        // not return until the kernel has completed both entries (the loop below reaps exactly
        // the two completions, or aborts the process if the ring cannot be waited on).
        #[expect(
            unsafe_code,
            reason = "io_uring submissions borrow the buffer until completion"
        )]
        let pushed = unsafe {
            let mut queue = ring.submission();
            queue.push(&write).is_ok() && queue.push(&sync).is_ok()
        };
        assert!(
            pushed,
            "the ring is drained after every submission, so it has room for two"
        );
        let mut outcome = Outcome { write: 0, sync: 0 };
        let mut reaped = 0;
        let mut failures = 0;
        while reaped < 2 {
            if let Err(error) = ring.submit_and_wait(2 - reaped) {
                failures += 1;
                let retryable = matches!(error.raw_os_error(), Some(4 | 11 | 16)); // EINTR, EAGAIN, EBUSY
                if !retryable || failures > 1000 {
                    // The kernel may still read `buf`: returning would hand it memory we free.
                    eprintln!("io_uring wait failed ({error}) with a write in flight: aborting");
                    std::process::abort();
                }
                continue;
            }
            for completion in ring.completion() {
                match completion.user_data() {
                    0 => outcome.write = completion.result(),
                    _ => outcome.sync = completion.result(),
                }
                reaped += 1;
            }
        }
        outcome
    }
}
