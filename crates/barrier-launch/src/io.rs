//! The ranks' standard streams: stdin to rank 0 (or nobody), output tagged by rank, and the
//! start-up progress line.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::proc;

/// Who gets the launcher's standard input: rank 0 only, as with `mpirun`; every other rank reads
/// an empty input. A terminal is never handed to a rank: the ranks run in process groups of
/// their own (so a signal reaches everything a rank started), and a background group that reads
/// the terminal is stopped by SIGTTIN. From a terminal the launcher forwards what is typed to
/// rank 0 through a pipe, and only while the launcher is in the terminal's foreground.
pub(super) enum StdinPlan {
    /// Not a terminal (a file, a pipe, /dev/null): rank 0 inherits it.
    Inherit,
    /// A terminal in whose foreground the launcher is: forwarded to rank 0.
    Forward(std::cell::RefCell<Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>>),
    /// A terminal the launcher may not read (it runs in the background): nothing.
    Nothing,
}

impl StdinPlan {
    pub(super) fn new() -> Self {
        match proc::stdin_terminal() {
            None => StdinPlan::Inherit,
            Some(true) => match proc::pipe() {
                Ok(ends) => StdinPlan::Forward(std::cell::RefCell::new(Some(ends))),
                Err(_) => StdinPlan::Nothing,
            },
            Some(false) => StdinPlan::Nothing,
        }
    }

    pub(super) fn for_rank(&self, rank: usize) -> Stdio {
        match (rank, self) {
            (0, StdinPlan::Inherit) => Stdio::inherit(),
            (0, StdinPlan::Forward(ends)) => match ends.borrow().as_ref().and_then(|(r, _)| r.try_clone().ok()) {
                Some(read) => Stdio::from(read),
                None => Stdio::null(),
            },
            _ => Stdio::null(),
        }
    }

    /// Rank 0 has its copy of the read end: start copying the terminal into the write end.
    pub(super) fn started_rank0(&self) {
        let StdinPlan::Forward(ends) = self else { return };
        let Some((read, write)) = ends.borrow_mut().take() else { return };
        drop(read);
        // The thread ends when rank 0 stops reading (the write fails) or the terminal closes.
        let _ = std::thread::Builder::new().name("stdin-to-rank0".into()).spawn(move || {
            let mut to_rank0 = std::fs::File::from(write);
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_rank0);
        });
    }
}

/// The longest piece of a rank's output `--tag-output` holds back waiting for a newline: a longer
/// line goes out in pieces of this size, each tagged and ended with a newline, so a rank that
/// writes without newlines cannot make the launcher hold its output in memory.
pub const TAG_LINE_BOUND: usize = 64 * 1024;

/// Jobs of at most this many ranks have their standard error forwarded a whole line at a time
/// (a thread per rank); larger jobs' ranks write to the launcher's directly.
pub const WHOLE_LINES_UP_TO: usize = 256;

/// Copies a rank's output to the launcher's, each whole line (prefixed with `[rank] ` when
/// `tag` is given) written in one call, so lines of different ranks never mix; see
/// [`TAG_LINE_BOUND`].
pub(super) fn tag_lines(
    pipe: impl Read + Send + 'static,
    tag: Option<usize>,
    stderr: bool,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        use std::io::{BufRead, Read as _, Write};
        let mut lines = std::io::BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut lines).take(TAG_LINE_BOUND as u64).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    let mut tagged = tag.map(|rank| format!("[{rank}] ").into_bytes()).unwrap_or_default();
                    tagged.extend_from_slice(&line);
                    let _ = if stderr {
                        std::io::stderr().lock().write_all(&tagged)
                    } else {
                        std::io::stdout().lock().write_all(&tagged)
                    };
                }
            }
        }
        String::new()
    })
}

/// A progress line on a terminal while many ranks start (nothing otherwise).
pub(super) struct StartProgress {
    ranks: usize,
    shown: Option<Instant>,
}

impl StartProgress {
    /// Shown for jobs of at least this many ranks.
    const FROM: usize = 64;

    pub(super) fn new(ranks: usize) -> Self {
        let on = ranks >= Self::FROM && proc::stderr_terminal();
        let long_ago = Instant::now().checked_sub(Duration::from_secs(1)).unwrap_or_else(Instant::now);
        StartProgress { ranks, shown: on.then_some(long_ago) }
    }

    pub(super) fn show(&mut self, started: usize) {
        if let Some(last) = self.shown {
            if last.elapsed() >= Duration::from_millis(100) {
                eprint!("\rbarrier run: starting ranks: {started} of {}", self.ranks);
                self.shown = Some(Instant::now());
            }
        }
    }

    pub(super) fn done(&mut self, took: Duration) {
        if self.shown.take().is_some() {
            eprintln!("\rbarrier run: started {} ranks in {took:.2?}          ", self.ranks);
        }
    }
}

pub(super) fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}
