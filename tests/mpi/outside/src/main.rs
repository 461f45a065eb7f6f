//! A user's rsmpi program outside the workspace: `use barrier_mpi::FastBarrier;` and our
//! barrier is a method of every rsmpi communicator, blocking and split-phase, on the world, on
//! a split communicator and on a duplicate given settings in code. Each barrier is checked: the
//! latest arrival (the machine's monotonic clock just before the call, reduced with MPI_MAX)
//! must come before the earliest departure (just after it, reduced with MPI_MIN).

use std::process::ExitCode;
use std::time::Duration;

use barrier_mpi::{FastBarrier, FastBarrierSettings};
use mpi::collective::SystemOperation;
use mpi::topology::Color;
use mpi::traits::*;

fn clock() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `barrier` `rounds` times on `comm`, with a short sleep on one rank in turn, and fails if
/// any rank left before the last one arrived.
fn checked<C: Communicator>(
    comm: &C,
    what: &str,
    rounds: u64,
    barrier: impl Fn() -> barrier_mpi::Result<()>,
) -> Result<(), String> {
    let rank = comm.rank() as u64;
    for round in 0..rounds {
        if round % comm.size() as u64 == rank {
            std::thread::sleep(Duration::from_micros(50));
        }
        let arrived = clock();
        barrier().map_err(|e| format!("{what}: {e}"))?;
        let left = clock();
        let (mut last_in, mut first_out) = (0u64, 0u64);
        comm.all_reduce_into(&arrived, &mut last_in, SystemOperation::max());
        comm.all_reduce_into(&left, &mut first_out, SystemOperation::min());
        if first_out < last_in {
            return Err(format!(
                "{what}: round {round}: a rank left {} ns before the last arrived",
                last_in - first_out
            ));
        }
    }
    Ok(())
}

fn run() -> Result<String, String> {
    let universe = mpi::initialize().ok_or("MPI was initialized already")?;
    let world = universe.world();
    let rank = world.rank();
    // Settings in code, on a duplicate, before its first barrier.
    let dup = world.duplicate();
    // (WaitPolicy from barrier_mpi itself: no dependency on the core crate.)
    FastBarrierSettings::new()
        .timeout(Duration::from_secs(120))
        .wait_policy(barrier_mpi::WaitPolicy::Park)
        .attach(&dup)
        .map_err(|e| e.to_string())?;
    let half = world.split_by_color(Color::with_value(rank % 2)).ok_or("no split communicator")?;

    checked(&world, "world, blocking", 300, || world.fast_barrier())?;
    checked(&world, "world, split phase", 300, || {
        let mut request = world.immediate_fast_barrier()?;
        while !request.test()? {
            std::hint::spin_loop();
        }
        Ok(())
    })?;
    // Several outstanding at once, and a blocking barrier while they are (they complete in
    // order, the blocking one last), as MPI allows.
    checked(&world, "two split-phase barriers and a blocking one", 100, || {
        let first = world.immediate_fast_barrier()?;
        let mut second = world.immediate_fast_barrier()?;
        let _ = second.test()?;
        world.fast_barrier()?;
        first.wait()?;
        second.wait()
    })?;
    checked(&half, "split communicator, blocking", 200, || half.fast_barrier())?;
    checked(&half, "split communicator, split phase", 200, || half.immediate_fast_barrier()?.wait())?;
    checked(&dup, "duplicate with settings", 200, || dup.fast_barrier())?;
    // The advanced type moved to another thread: below MPI_THREAD_SERIALIZED only the thread
    // that made it may call MPI through it, and it says so instead of calling.
    let moved = FastBarrierSettings::new().build(&world).map_err(|e| e.to_string())?;
    let elsewhere = std::thread::spawn(move || moved.barrier().map_err(|e| e.to_string())).join().unwrap();
    let serialized = mpi::environment::threading_support() >= mpi::Threading::Serialized;
    match (serialized, elsewhere) {
        (false, Err(e)) if e.contains("made on another thread") => {}
        (true, Ok(())) => {}
        (_, other) => return Err(format!("a communicator moved to another thread: {other:?}")),
    }
    // A second attach is refused: settings apply when the barrier is built.
    if FastBarrierSettings::new().attach(&dup).is_ok() {
        return Err("a second attach on a communicator with a barrier was accepted".into());
    }
    let line = world.fast_barrier_describe().map_err(|e| e.to_string())?;
    let summary = world.fast_barrier_summary().map_err(|e| e.to_string())?;
    if !line.starts_with(&summary) {
        return Err(format!("the summary {summary:?} is not the first part of the description {line:?}"));
    }
    if rank != 0 {
        return Ok(String::new());
    }
    Ok(format!("outside: {} ranks passed; {summary}", world.size()))
}

/// `outside errors`: settings given in code are named in errors as the methods that set them
/// (issue 41 item 3), never as the environment's variables. An unknown backend fails on every
/// rank; a barrier that the last rank joins 2 s late times out on the others within
/// `FastBarrierSettings::timeout`'s 300 ms. The job then ends without MPI_Finalize (the failed
/// barrier left messages unmatched), every rank exits with 3; the test reads stderr.
fn errors() -> Result<String, String> {
    let universe = mpi::initialize().ok_or("MPI was initialized already")?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let no_variable = |e: &str| {
        if e.contains("BARRIER_BACKEND") || e.contains("BARRIER_TIMEOUT") {
            Err(format!("an error names a variable for a setting given in code: {e}"))
        } else {
            Ok(())
        }
    };
    match FastBarrierSettings::new().backend("nonesuch").build(&world) {
        Ok(_) => return Err("a barrier with an unknown backend was built".into()),
        Err(e) => {
            let e = e.to_string();
            if !e.contains("\"nonesuch\" in FastBarrierSettings::backend") {
                return Err(format!("the unknown backend's error: {e}"));
            }
            no_variable(&e)?;
        }
    }
    let dup = world.duplicate();
    FastBarrierSettings::new().timeout(Duration::from_millis(300)).attach(&dup).map_err(|e| e.to_string())?;
    dup.fast_barrier().map_err(|e| e.to_string())?;
    if rank == size - 1 {
        std::thread::sleep(Duration::from_secs(2));
    }
    let late = dup.fast_barrier();
    if rank == 0 {
        let e = late.err().ok_or("world rank 0 passed a barrier that the last rank joined 2 s late")?.to_string();
        if !e.contains("or raise FastBarrierSettings::timeout") {
            return Err(format!("the timeout's error: {e}"));
        }
        no_variable(&e)?;
        eprintln!("outside errors: named as given: {e}");
    }
    // Not a success: no rank finalizes (see above); 3 on every rank, whatever the launcher.
    std::process::exit(3)
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1);
    match if mode.as_deref() == Some("errors") { errors() } else { run() } {
        Ok(line) => {
            if !line.is_empty() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("outside: FAILED: {e}");
            ExitCode::from(1)
        }
    }
}
