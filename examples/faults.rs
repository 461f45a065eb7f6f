//! A program that misbehaves on purpose, for the failure tests (`tests/hardening.rs`) and for
//! trying the failure semantics by hand (`docs/failures.md`):
//!
//! ```text
//! barrier run -n 3 -- target/release/examples/faults exit-early 2     rank 2 exits (status 0) early
//! barrier run -n 3 -- target/release/examples/faults stall 2 1500     rank 2 is 1.5 s late
//! barrier run -n 3 -- target/release/examples/faults crash 1         rank 1 dies of abort(3)
//! barrier run -n 3 -- target/release/examples/faults linger-on-error  a rank whose own setting is
//!                                                                    bad prints it and stays 20 s
//! barrier run -n 2 -- target/release/examples/faults spawn-child      rank 0 starts a copy of itself
//!                                                     [keep-fd]      ... and hands it the job's fd
//! barrier run -n 2 -- target/release/examples/faults hold-group 2000  rank 1 stays 2 s longer
//! barrier run -n 3 -- target/release/examples/faults abort 1          rank 1 calls abort(7)
//! barrier run -n 2 -- target/release/examples/faults usage            print the segment's size
//! barrier run -n 3 -- target/release/examples/faults corrupt-header   rank 1 writes over the header
//! barrier run -n 2 -- target/release/examples/faults wait-usr1        wait for SIGUSR1, barrier, exit
//! barrier run -n 2 -- target/release/examples/faults spin             barriers until killed
//! ```
//!
//! Each rank prints what happened to it on stderr as `rank R: ...`; the exit status says which
//! outcome it saw (0: the barriers completed, 3: init failed, 5: a barrier failed).

use std::process::ExitCode;
use std::time::Duration;

/// One line to stderr in one write: the launcher may stop this rank at any moment (another
/// rank failed), and a line cut between two writes would lose its end.
fn say(line: String) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn arg(args: &[String], i: usize, what: &str) -> u64 {
    args.get(i).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("faults: expected {what} at argument {i}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    if mode == "child-init" {
        // A subprocess of a rank: it inherited the rank's BARRIER_* environment.
        return match barrier::init() {
            Ok(u) => {
                say(format!("child: joined the job as rank {} (a duplicate rank)", u.rank()));
                ExitCode::from(9)
            }
            Err(e) => {
                say(format!("child: init refused: {e}"));
                ExitCode::SUCCESS
            }
        };
    }
    let rank = std::env::var(barrier::ENV_RANK).unwrap_or_default();
    let setup_failed = |what: &str, e: barrier::Error| {
        say(format!("rank {rank}: {what}: {e}"));
        // A program that handles its own error and goes on living: the others must not wait.
        if mode == "linger-on-error" {
            let own = !matches!(e, barrier::Error::PeerInvalidParam { .. } | barrier::Error::MismatchedParam { .. });
            // Peers linger briefly too, so that each prints before the launcher stops the job.
            std::thread::sleep(if own { Duration::from_secs(20) } else { Duration::from_millis(200) });
        }
        ExitCode::from(3)
    };
    let universe = match barrier::init() {
        Ok(u) => u,
        Err(e) => return setup_failed("init", e),
    };
    let world = universe.world();
    let me = world.rank();
    let result = match mode {
        "exit-early" => {
            let who = arg(&args, 1, "a rank") as usize;
            world.barrier().and_then(|()| {
                if me == who {
                    // No destructors: the communicator is never dropped, only the launcher sees it.
                    std::process::exit(0);
                }
                world.barrier()
            })
        }
        "stall" => {
            let (who, ms) = (arg(&args, 1, "a rank") as usize, arg(&args, 2, "milliseconds"));
            if me == who {
                std::thread::sleep(Duration::from_millis(ms));
            }
            world.barrier()
        }
        "linger-on-error" => world.barrier(),
        "spawn-child" => {
            if me == 0 {
                if args.get(1).is_some_and(|a| a == "keep-fd") {
                    // Hand the job's descriptor to the child on purpose (init made it close-on-exec).
                    let fd: i32 = std::env::var(barrier::ENV_SHM_FD).unwrap().parse().unwrap();
                    // SAFETY: F_SETFD only changes the descriptor's flags.
                    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
                }
                let status = std::process::Command::new(std::env::current_exe().expect("own path"))
                    .arg("child-init")
                    .status()
                    .expect("starting the child");
                say(format!("rank 0: child ended with {status}"));
                if !status.success() {
                    return ExitCode::from(6);
                }
            }
            world.barrier()
        }
        "hold-group" => {
            // Rank 0 (which claimed the world's device group) leaves and exits; rank 1 keeps
            // its membership a while longer: the group must stay this job's until it is done.
            let ms = arg(&args, 1, "milliseconds");
            if me == 1 {
                std::thread::sleep(Duration::from_millis(ms));
            }
            say(format!("rank {me}: {} leaves", world.algorithm()));
            Ok(())
        }
        "crash" => {
            // A rank that dies of abort(3) (SIGABRT) after the first barrier: the others fail
            // when they see it gone, and the launcher must blame the crashed rank, not them.
            let who = arg(&args, 1, "a rank") as usize;
            world.barrier().and_then(|()| {
                if me == who {
                    std::process::abort();
                }
                world.barrier()
            })
        }
        "abort" => {
            // MPI_Abort from one rank: the job ends with its code.
            let who = arg(&args, 1, "a rank") as usize;
            if me == who {
                world.abort(7);
            }
            world.barrier().and_then(|()| world.barrier())
        }
        "wait-usr1" => {
            // A program that checkpoints on SIGUSR1: it waits for the signal (up to 30 s),
            // then every rank meets in a barrier and says it got it.
            static GOT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            extern "C" fn on_usr1(_: libc::c_int) {
                GOT.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            // SAFETY: installs an async-signal-safe handler (one atomic store) for SIGUSR1.
            unsafe { libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t) };
            say(format!("rank {me}: ready"));
            let t0 = std::time::Instant::now();
            while !GOT.load(std::sync::atomic::Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let got = GOT.load(std::sync::atomic::Ordering::SeqCst);
            world.barrier().map(|()| say(format!("rank {me}: SIGUSR1 {}", if got { "received" } else { "never came" })))
        }
        "corrupt-header" => {
            // A rank gone wrong: it writes over the job segment's header (a huge world, a rank
            // table past the end), names rank 5 of a smaller job in the abort word, and exits 3.
            // The launcher and the other ranks must report it, not crash or write out of bounds.
            if me == 1 {
                corrupt_the_header();
                std::process::exit(3);
            }
            world.barrier()
        }
        "usage" => {
            let (used, total) = world.segment_usage();
            say(format!("rank {me}: segment {total} bytes, {used} in use"));
            world.barrier()
        }
        "spin" => loop {
            if let Err(e) = world.barrier() {
                break Err(e);
            }
        },
        other => panic!("faults: unknown mode {other:?}"),
    };
    match result {
        Ok(()) => {
            say(format!("rank {me}: done"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(format!("rank {me}: {e}"));
            ExitCode::from(5)
        }
    }
}

/// Writes over the job segment's header through this rank's own mapping of it: `world_size`
/// (the fourth word) and `rank_table` (the ninth), then the abort word (through the library,
/// naming rank 5).
fn corrupt_the_header() {
    let fd: i32 = std::env::var(barrier::ENV_SHM_FD).expect("a rank of the launcher").parse().expect("a descriptor");
    let seg = barrier::shm::Segment::from_fd(fd).expect("the job segment");
    seg.set_abort(5);
    let len = seg.len();
    // SAFETY: maps the segment's first page again, shared; only its header words are written,
    // which is the fault this mode injects (the words are atomics in the other mappings).
    unsafe {
        let base = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        assert_ne!(base, libc::MAP_FAILED, "mapping the header");
        let words = base as *mut u64;
        words.add(3).write_volatile(1 << 60);
        words.add(8).write_volatile(len as u64);
    }
}
