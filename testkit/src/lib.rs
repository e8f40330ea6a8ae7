//! Runs a built binary the way an operator does, for the tests of each binary: stdin, stdout and
//! stderr as pipes, or stderr (or all three) on a pseudo-terminal where a progress bar or colour
//! depends on it. Every run has a deadline; a child still running at its deadline is a failed
//! test that names what the child was doing (its state, each thread's kernel wait channel and,
//! where `gdb` is installed, every thread's backtrace), not a run that hangs until CI kills it.
//! The deadline is a guard against a hang, never a speed assertion: set it many times what the
//! run takes.
//!
//! Test support only: nothing here is linked into a binary.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the child's standard streams go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streams {
    /// stdin, stdout and stderr are pipes (a script, `| head`, a CI log).
    Pipes,
    /// stderr is a terminal (an operator watching progress), stdin and stdout pipes.
    StderrOnTerminal,
    /// stdin, stdout and stderr are all the same terminal (an interactive session).
    AllOnTerminal,
}

/// How a run ended and what it printed.
#[derive(Clone, Debug)]
pub struct Output {
    /// The exit code, `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    /// What went to stderr (with [`Streams::AllOnTerminal`], everything the terminal showed).
    pub stderr: String,
}

impl Output {
    /// The exit code; fails the test with the output when a signal ended the child.
    #[must_use]
    pub fn code(&self) -> i32 {
        match self.code {
            Some(code) => code,
            None => panic!("the child was killed by a signal\n{}", self.describe()),
        }
    }

    /// Both streams, for a failed assertion's message.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "exit code {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// One run: the command, what it reads on stdin, where its streams go and its deadline.
pub struct Run {
    command: Command,
    input: Vec<u8>,
    streams: Streams,
    deadline: Duration,
    stdout_limit: Option<usize>,
}

impl Run {
    /// A run of `command` with an empty stdin, pipes and a deadline of two minutes.
    #[must_use]
    pub fn new(command: Command) -> Self {
        Self {
            command,
            input: Vec::new(),
            streams: Streams::Pipes,
            deadline: Duration::from_secs(120),
            stdout_limit: None,
        }
    }

    /// What the child reads on stdin (then end of file).
    #[must_use]
    pub fn input(mut self, bytes: &[u8]) -> Self {
        self.input = bytes.to_vec();
        self
    }

    #[must_use]
    pub fn streams(mut self, streams: Streams) -> Self {
        self.streams = streams;
        self
    }

    /// The longest the child may run before the test fails with its state.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Reads only this many bytes of stdout, then closes the pipe (what `| head -c N` does):
    /// the child's next write meets a closed pipe.
    #[must_use]
    pub fn close_stdout_after(mut self, bytes: usize) -> Self {
        self.stdout_limit = Some(bytes);
        self
    }

    /// Runs the child to its end (or fails the test at the deadline).
    ///
    /// # Panics
    /// When the child cannot be started, or is still running at the deadline.
    #[must_use]
    pub fn output(self) -> Output {
        let Self {
            mut command,
            input,
            streams,
            deadline,
            stdout_limit,
        } = self;
        let program = format!("{command:?}");
        let terminal = match streams {
            Streams::Pipes => None,
            Streams::StderrOnTerminal | Streams::AllOnTerminal => Some(open_terminal()),
        };
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command.stdin(Stdio::piped());
        if let Some((_, replica)) = &terminal {
            let slave = || Stdio::from(dup(replica));
            command.stderr(slave());
            if streams == Streams::AllOnTerminal {
                command.stdin(slave());
                command.stdout(slave());
            }
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        // The parent's copies of the terminal's child side go, so the terminal reports its end
        // once the child (and whatever inherited it) has exited.
        drop(command);
        let terminal = terminal.map(|(controller, replica)| {
            drop(replica);
            controller
        });
        let pid = child.id();
        let writer = feed(&mut child, input, terminal.as_ref(), streams);
        let stdout = child.stdout.take().map(|pipe| drain(pipe, stdout_limit));
        let stderr = child.stderr.take().map(|pipe| drain(pipe, None));
        let screen = terminal.map(|controller| drain(Fd(controller), None));
        let status = wait(child, pid, deadline, &program);
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        let text = |reader: Option<JoinHandle<Vec<u8>>>| {
            reader
                .and_then(|r| r.join().ok())
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default()
        };
        let stdout_text = text(stdout);
        let stderr_text = text(stderr);
        let screen_text = text(screen);
        Output {
            code: status.code(),
            stdout: if streams == Streams::AllOnTerminal {
                screen_text.clone()
            } else {
                stdout_text
            },
            stderr: if terminal_used(streams) {
                screen_text
            } else {
                stderr_text
            },
        }
    }
}

fn terminal_used(streams: Streams) -> bool {
    streams != Streams::Pipes
}

/// Writes `input` to the child's stdin (the pipe, or the terminal) on a thread and closes it.
fn feed(
    child: &mut Child,
    input: Vec<u8>,
    terminal: Option<&OwnedFd>,
    streams: Streams,
) -> Option<JoinHandle<()>> {
    if streams == Streams::AllOnTerminal {
        if let Some(controller) = terminal
            && !input.is_empty()
        {
            let mut file = Fd(dup(controller));
            return Some(std::thread::spawn(move || {
                let _ = file.write_all(&input);
            }));
        }
        return None;
    }
    let mut stdin = child.stdin.take()?;
    Some(std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    }))
}

/// Reads `from` to its end (or `limit` bytes, then closes it) on a thread.
fn drain(mut from: impl Read + Send + 'static, limit: Option<usize>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 8192];
        loop {
            match from.read(&mut buffer) {
                // A terminal whose child side every process closed reads as EIO.
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    bytes.extend_from_slice(&buffer[..n]);
                    if limit.is_some_and(|l| bytes.len() >= l) {
                        bytes.truncate(limit.unwrap_or(0));
                        break;
                    }
                }
            }
        }
        bytes
    })
}

/// Waits for the child; at the deadline, fails the test with what it was doing.
fn wait(mut child: Child, pid: u32, deadline: Duration, program: &str) -> std::process::ExitStatus {
    let (done, exited) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    match exited.recv_timeout(deadline) {
        Ok(Ok(status)) => {
            let _ = waiter.join();
            status
        }
        Ok(Err(error)) => panic!("waiting for {program}: {error}"),
        Err(_) => {
            let state = process_state(pid);
            if let Some(pid) = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = exited.recv_timeout(Duration::from_secs(10));
            panic!(
                "{program} (pid {pid}) was still running after {deadline:?}: a hang (this \
                 deadline is a guard, not a speed limit). Its state when it was killed:\n{state}"
            );
        }
    }
}

/// The child's state: each thread's name, scheduler state and kernel wait channel, and its
/// backtraces where `gdb` is installed.
fn process_state(pid: u32) -> String {
    let mut out = String::new();
    for line in read_proc(&format!("/proc/{pid}/status")).lines() {
        if line.starts_with("State:") || line.starts_with("Threads:") {
            out.push_str(line);
            out.push('\n');
        }
    }
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    let mut tids: Vec<String> = list_dir(&tasks);
    tids.sort();
    for tid in tids {
        let comm = read_proc(&format!("/proc/{pid}/task/{tid}/comm"));
        let stat = read_proc(&format!("/proc/{pid}/task/{tid}/stat"));
        // The state is the field after the parenthesised name.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let wchan = read_proc(&format!("/proc/{pid}/task/{tid}/wchan"));
        out.push_str(&format!(
            "thread {tid} ({}): state {state}, waiting in {}\n",
            comm.trim(),
            if wchan.trim().is_empty() || wchan.trim() == "0" {
                "-"
            } else {
                wchan.trim()
            }
        ));
    }
    // gdb under its own bound: an attach that hangs must not hang the report of a hang.
    let gdb = Command::new("timeout")
        .args([
            "60",
            "gdb",
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "thread apply all bt",
        ])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(output) => {
            out.push_str("--- gdb: thread apply all bt ---\n");
            out.push_str(&String::from_utf8_lossy(&output.stdout));
        }
        Err(_) => out.push_str("(no gdb here for backtraces)\n"),
    }
    out
}

/// A kernel file's text (empty when it cannot be read).
fn read_proc(path: &str) -> String {
    let Ok(fd) = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return String::new();
    };
    let mut bytes = Vec::new();
    let _ = Fd(fd).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn list_dir(path: &std::path::Path) -> Vec<String> {
    let Ok(fd) = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(dir) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "." && n != "..")
        .collect()
}

/// A new pseudo-terminal of 120 columns and 40 rows: its controlling side and its child side.
fn open_terminal() -> (OwnedFd, OwnedFd) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
        .unwrap_or_else(|e| panic!("openpt: {e}"));
    grantpt(&controller).unwrap_or_else(|e| panic!("grantpt: {e}"));
    unlockpt(&controller).unwrap_or_else(|e| panic!("unlockpt: {e}"));
    let name = ptsname(&controller, Vec::new()).unwrap_or_else(|e| panic!("ptsname: {e}"));
    let replica = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY,
        rustix::fs::Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("opening the terminal's child side: {e}"));
    // A terminal with a size: progress bars draw to its width (a size of 0 draws nothing).
    let size = rustix::termios::Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&replica, size)
        .unwrap_or_else(|e| panic!("setting the terminal's size: {e}"));
    (controller, replica)
}

/// A descriptor read and written through `rustix` (the workspace keeps `std::fs` to the `io`
/// crate).
struct Fd(OwnedFd);

impl Read for Fd {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        rustix::io::read(&self.0, buffer).map_err(std::io::Error::from)
    }
}

impl Write for Fd {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        rustix::io::write(&self.0, bytes).map_err(std::io::Error::from)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn dup(fd: &OwnedFd) -> OwnedFd {
    fd.as_fd()
        .try_clone_to_owned()
        .unwrap_or_else(|e| panic!("dup: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_sees_a_terminal_on_stderr_and_pipes_elsewhere() {
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "test -t 2 && echo tty >&2; test -t 1 || echo pipe; cat",
        ]);
        let out = Run::new(command)
            .input(b"fed\n")
            .streams(Streams::StderrOnTerminal)
            .output();
        assert_eq!(out.code(), 0, "{}", out.describe());
        assert!(out.stderr.contains("tty"), "{}", out.describe());
        assert_eq!(out.stdout, "pipe\nfed\n", "{}", out.describe());
    }

    #[test]
    fn a_hung_child_fails_with_its_state() {
        let mut command = Command::new("sleep");
        command.arg("600");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Run::new(command)
                .deadline(Duration::from_millis(300))
                .output()
        }));
        let message = result
            .err()
            .and_then(|e| e.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(message.contains("still running"), "{message}");
        assert!(message.contains("thread "), "{message}");
    }

    #[test]
    fn a_closed_stdout_is_what_the_child_meets_next() {
        let mut command = Command::new("sh");
        command.args(["-c", "yes | head -c 1000000; echo done >&2"]);
        let out = Run::new(command).close_stdout_after(10).output();
        assert_eq!(out.stdout.len(), 10);
    }
}
