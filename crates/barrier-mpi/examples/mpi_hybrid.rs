//! Every thread of every rank in one barrier (MPI + threads, `MPI_THREAD_FUNNELED`): each rank
//! has a team of T threads (`barrier::sync::Team`); member 0 is the thread that calls MPI. A
//! hybrid barrier is `Member::wait_then` around the rank's barrier (`FastBarrier`): the team's
//! gather, the ranks' barrier on member 0 (the node's gather, the roots, the node's release),
//! the team's release. It is checked and then timed against the usual three-barrier pattern
//! ("team barrier; the rank's barrier on one thread; team barrier"):
//!
//! * **checked**: every thread of every rank reads the machine's monotonic clock just before
//!   each hybrid barrier and just after it; for every barrier the earliest departure of any
//!   thread of any rank must come after the latest arrival (ranks of one machine share that
//!   clock), or a thread left early;
//! * **timed**: ITERS barriers of each form, in alternating chunks of 100, the same threads;
//!   rank 0 prints the medians of the chunks and their ratio.
//!
//! ```sh
//! cargo build --release -p barrier-mpi --features mpi --example mpi_hybrid
//! mpirun -np 2 target/release/examples/mpi_hybrid 2 2000      # 2 ranks x 2 threads
//! BARRIER_MPI_NODE_BLOCK=1 mpirun -np 2 target/release/examples/mpi_hybrid 2 2000   # across "nodes"
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use barrier::sync::Member;
use barrier_mpi::FastBarrier;
use mpi::traits::*;

/// Barriers per timed chunk.
const CHUNK: usize = 100;
/// Hybrid barriers checked before the timing.
const CHECKED: usize = 300;

/// The machine's monotonic clock in ns (one clock for every process of the machine).
fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2).max(1);
    let iters: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2000).max(CHUNK);
    let (universe, level) =
        barrier_mpi::initialize_with_threading(mpi::Threading::Funneled).ok_or("MPI was initialized already")?;
    if level < mpi::Threading::Funneled {
        return Err(format!("this MPI gives {level:?}, not Funneled"));
    }
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size() as usize);
    let fail = |e: barrier::Error| e.to_string();
    // Our barrier on the world, made on this (the MPI) thread.
    world.fast_barrier().map_err(|e| e.to_string())?;
    // The team waits as the ranks do: where every rank's threads together outnumber the
    // machine's cores, it parks (Team::new would judge by this rank's threads alone, and spin:
    // 4 ranks x 2 threads on 2 cores took 210 us a barrier so), unless BARRIER_WAIT_POLICY says.
    // The world's fast_barrier above took the census of the job's ranks on this machine.
    let team = barrier_mpi::hybrid_team(threads);
    let mut members: Vec<Member> = (0..threads).map(|_| team.join().map_err(fail)).collect::<Result<_, _>>()?;
    let mut leader = members.remove(0);
    // Per barrier: the latest arrival and the earliest departure of this rank's threads.
    let last_in: Vec<AtomicU64> = (0..CHECKED).map(|_| AtomicU64::new(0)).collect();
    let first_out: Vec<AtomicU64> = (0..CHECKED).map(|_| AtomicU64::new(u64::MAX)).collect();
    let record = |b: usize, arrive: u64, leave: u64| {
        last_in[b].fetch_max(arrive, Ordering::Relaxed);
        first_out[b].fetch_min(leave, Ordering::Relaxed);
    };
    let chunks = iters / CHUNK;
    let (mut hybrid, mut three) = (Vec::new(), Vec::new());
    std::thread::scope(|s| -> Result<(), String> {
        let mut others = Vec::new();
        for mut member in members.drain(..) {
            let record = &record;
            others.push(s.spawn(move || -> Result<(), String> {
                for b in 0..CHECKED {
                    let arrive = now_ns();
                    member.wait_then(|| Ok(())).map_err(|e| e.to_string())?;
                    record(b, arrive, now_ns());
                }
                for _ in 0..chunks {
                    for _ in 0..CHUNK {
                        member.wait_then(|| Ok(())).map_err(|e| e.to_string())?;
                    }
                    for _ in 0..CHUNK {
                        member.wait().map_err(|e| e.to_string())?;
                        member.wait().map_err(|e| e.to_string())?;
                    }
                }
                Ok(())
            }));
        }
        // Member 0: this thread, the one that calls MPI.
        for b in 0..CHECKED {
            let arrive = now_ns();
            leader.wait_then(|| world.fast_barrier()).map_err(fail)?;
            record(b, arrive, now_ns());
        }
        for _ in 0..chunks {
            let t = now_ns();
            for _ in 0..CHUNK {
                leader.wait_then(|| world.fast_barrier()).map_err(fail)?;
            }
            hybrid.push((now_ns() - t) as f64 / CHUNK as f64);
            let t = now_ns();
            for _ in 0..CHUNK {
                leader.wait().map_err(fail)?;
                world.fast_barrier().map_err(fail)?;
                leader.wait().map_err(fail)?;
            }
            three.push((now_ns() - t) as f64 / CHUNK as f64);
        }
        for other in others {
            other.join().map_err(|_| "a thread panicked".to_string())??;
        }
        Ok(())
    })?;
    // Every barrier: no thread of any rank left before the last thread of every rank arrived.
    let mine_in: Vec<u64> = last_in.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let mine_out: Vec<u64> = first_out.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let mut all_in = vec![0u64; size * CHECKED];
    let mut all_out = vec![0u64; size * CHECKED];
    world.all_gather_into(&mine_in[..], &mut all_in[..]);
    world.all_gather_into(&mine_out[..], &mut all_out[..]);
    for b in 0..CHECKED {
        let latest = (0..size).map(|r| all_in[r * CHECKED + b]).max().unwrap_or(0);
        let (early, out) = (0..size).map(|r| (r, all_out[r * CHECKED + b])).min_by_key(|&(_, t)| t).unwrap_or((0, 0));
        if out < latest {
            return Err(format!(
                "hybrid barrier {b}: a thread of rank {early} left {} ns before the last thread arrived",
                latest - out
            ));
        }
    }
    let describe = world.fast_barrier_describe().map_err(|e| e.to_string())?;
    let (h, t) = (median(hybrid), median(three));
    Ok(if rank == 0 {
        format!(
            "hybrid: {size} ranks x {threads} threads, {CHECKED} hybrid barriers checked: no thread left early; \
             hybrid median {h:.0} ns, three-barrier pattern {t:.0} ns, ratio {:.3}; {describe}",
            h / t
        )
    } else {
        String::new()
    })
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            if !line.is_empty() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            barrier::text::say(&format!("hybrid: FAILED: {e}"));
            ExitCode::FAILURE
        }
    }
}
