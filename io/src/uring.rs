//! The io_uring path of `OsStorage`: a write and an `fdatasync` linked in one submission
//! (`IOSQE_IO_LINK`: the sync starts only after the write completed in full), one system call
//! instead of two. Used when the kernel allows io_uring; `OsStorage` falls back to plain system
//! calls otherwise (and when asked to, for tests of both paths).

use std::cell::RefCell;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, opcode, squeue, types};

/// One ring per thread: the durable writes of different groups on a node, each publishing from
/// its own storage thread, never queue behind one another's submission (one shared ring behind
/// a mutex made them run one at a time: docs/benchmarks.md, "Groups").
pub(crate) struct Ring {
    ring: IoUring,
}

thread_local! {
    /// This thread's ring, made on first use; `None` where the kernel refuses one.
    static RING: RefCell<Option<Ring>> = RefCell::new(Ring::new());
}

/// Runs `f` on this thread's ring; `None` when this thread has none (the kernel refused it), or
/// when `f` would nest inside a chain already running on it (the caller falls back to system
/// calls).
pub(crate) fn with_thread_ring<T>(f: impl FnOnce(&mut Ring) -> T) -> Option<T> {
    RING.with(|cell| {
        let mut ring = cell.try_borrow_mut().ok()?;
        ring.as_mut().map(f)
    })
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

/// One step of a linked chain.
pub(crate) enum Step<'a> {
    Write {
        fd: BorrowedFd<'a>,
        offset: u64,
        buf: &'a [u8],
    },
    SyncData {
        fd: BorrowedFd<'a>,
    },
}

/// Most steps in one chain (the ring's size).
pub(crate) const MAX_STEPS: usize = 8;

impl Ring {
    /// A ring, or `None` where the kernel (or a sandbox) does not allow io_uring.
    pub(crate) fn new() -> Option<Self> {
        IoUring::new(8).ok().map(|ring| Self { ring })
    }

    /// Writes `buf` at `offset` of `fd`, then `fdatasync`s it, as one linked submission, and
    /// waits for both completions. A short write breaks the link: the sync then reports
    /// `-ECANCELED` and the caller completes the rest with system calls.
    pub(crate) fn write_and_sync(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        buf: &[u8],
    ) -> Outcome {
        let results = self.chain(
            &[Step::Write { fd, offset, buf }, Step::SyncData { fd }],
            &mut || {},
        );
        Outcome {
            write: results[0],
            sync: results[1],
        }
    }

    /// Runs `steps` as one linked submission (`IOSQE_IO_LINK`: each starts only after the one
    /// before completed in full; a failed or short write cancels the rest with `-ECANCELED`)
    /// and returns each step's result (bytes written, 0, or `-errno`) once all completed.
    /// `in_flight` runs once the chain is submitted, while the kernel works on it; a panic in it
    /// is resumed only after every step has completed (the kernel still uses the buffers).
    pub(crate) fn chain(
        &mut self,
        steps: &[Step<'_>],
        in_flight: &mut dyn FnMut(),
    ) -> [i32; MAX_STEPS] {
        assert!(
            !steps.is_empty() && steps.len() <= MAX_STEPS,
            "{} steps in one chain",
            steps.len()
        );
        let entries: Vec<squeue::Entry> = steps
            .iter()
            .enumerate()
            .map(|(index, step)| {
                let entry = match step {
                    Step::Write { fd, offset, buf } => opcode::Write::new(
                        types::Fd(fd.as_raw_fd()),
                        buf.as_ptr(),
                        u32::try_from(buf.len()).unwrap_or(u32::MAX),
                    )
                    .offset(*offset)
                    .build(),
                    Step::SyncData { fd } => opcode::Fsync::new(types::Fd(fd.as_raw_fd()))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build(),
                };
                let entry = entry.user_data(index as u64);
                if index + 1 < steps.len() {
                    entry.flags(squeue::Flags::IO_LINK)
                } else {
                    entry
                }
            })
            .collect();
        let ring = &mut self.ring;
        // SAFETY: the entries point into buffers borrowed by `steps`, which outlive this call,
        // and this function does not return until the kernel has completed every entry (the
        // loop below reaps exactly that many completions, or aborts the process if the ring
        // cannot be waited on).
        #[expect(
            unsafe_code,
            reason = "io_uring submissions borrow the buffers until completion"
        )]
        let pushed = unsafe { ring.submission().push_multiple(&entries).is_ok() };
        assert!(
            pushed,
            "the ring is drained after every submission, so it has room for {MAX_STEPS}"
        );
        // A failed submit leaves the entries queued: the waiting loop below submits them again.
        let _ = ring.submit();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(in_flight)).err();
        let mut results = [0i32; MAX_STEPS];
        let mut reaped = 0;
        let mut failures = 0;
        while reaped < steps.len() {
            if let Err(error) = ring.submit_and_wait(steps.len() - reaped) {
                failures += 1;
                let retryable = matches!(error.raw_os_error(), Some(4 | 11 | 16)); // EINTR, EAGAIN, EBUSY
                if !retryable || failures > 1000 {
                    // The kernel may still read the buffers: returning would hand it memory we
                    // free.
                    eprintln!("io_uring wait failed ({error}) with a write in flight: aborting");
                    std::process::abort();
                }
                continue;
            }
            for completion in ring.completion() {
                let index = usize::try_from(completion.user_data()).unwrap_or(usize::MAX);
                if let Some(slot) = results.get_mut(index) {
                    *slot = completion.result();
                }
                reaped += 1;
            }
        }
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
        results
    }
}
