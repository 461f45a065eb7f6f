//! A barrier communicator on MPI_COMM_WORLD, checked: every rank publishes its arrival count in
//! memory shared by the ranks of its machine (`MPI_Win_allocate_shared`), and after every
//! barrier reads every other count: a count below the barrier's number means a rank was let
//! through before everyone arrived. Then the same on a split communicator (even and odd ranks).
//!
//! ```sh
//! cargo build --release -p barrier-mpi --features mpi --example mpi_barrier
//! mpirun -np 4 target/release/examples/mpi_barrier 2000
//! BARRIER_MPI_NODE_BLOCK=2 mpirun -np 4 target/release/examples/mpi_barrier 2000
//! ```
//!
//! `mpi_barrier late-retry` instead checks one barrier that world rank 1 reaches three seconds
//! late while the others time out and call it again: none may pass before rank 1 arrives.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use barrier_mpi::mpi::ffi;
use barrier_mpi::mpi::traits::Communicator as _;
use barrier_mpi::BarrierComm;

/// The arrival counts of the ranks of this machine, in one shared window.
struct Counts {
    win: ffi::MPI_Win,
    /// This machine's ranks' counters, by rank on the machine.
    words: Vec<*const AtomicU64>,
    me: usize,
}

impl Counts {
    fn new(machine: &impl barrier_mpi::mpi::topology::Communicator) -> Counts {
        let n = machine.size() as usize;
        let me = machine.rank() as usize;
        // SAFETY: MPI_Win_allocate_shared gives every rank 8 bytes (aligned, zeroed below) that
        // the ranks of `machine` can all map; MPI_Win_shared_query returns each rank's address.
        unsafe {
            let mut base: *mut c_void = std::ptr::null_mut();
            let mut win: ffi::MPI_Win = std::mem::zeroed();
            ffi::MPI_Win_allocate_shared(
                8,
                8,
                ffi::RSMPI_INFO_NULL,
                machine.as_raw(),
                (&mut base as *mut *mut c_void).cast(),
                &mut win,
            );
            (*(base as *const AtomicU64)).store(0, Ordering::SeqCst);
            let words = (0..n)
                .map(|r| {
                    let (mut size, mut unit): (ffi::MPI_Aint, i32) = (0, 0);
                    let mut ptr: *mut c_void = std::ptr::null_mut();
                    ffi::MPI_Win_shared_query(
                        win,
                        r as i32,
                        &mut size,
                        &mut unit,
                        (&mut ptr as *mut *mut c_void).cast(),
                    );
                    ptr as *const AtomicU64
                })
                .collect();
            ffi::MPI_Win_lock_all(0, win);
            ffi::PMPI_Barrier(machine.as_raw());
            Counts { win, words, me }
        }
    }

    fn publish(&self, count: u64) {
        // SAFETY: the window lives until `drop`; the word is this rank's own.
        unsafe { (*self.words[self.me]).store(count, Ordering::Release) }
    }

    /// Every count must be `count` or `count + 1` after barrier `count` (a faster rank may have
    /// published its next arrival, never more).
    fn check(&self, count: u64, what: &str) {
        for (r, &w) in self.words.iter().enumerate() {
            // SAFETY: as in `publish`.
            let seen = unsafe { (*w).load(Ordering::Acquire) };
            if seen < count || seen > count + 1 {
                barrier::text::say(&format!(
                    "mpi_barrier: FAILED on {what}: after barrier {count}, machine rank {r} has arrived {seen} times"
                ));
                std::process::exit(1);
            }
        }
    }
}

impl Drop for Counts {
    fn drop(&mut self) {
        // SAFETY: the window was locked in `new`; freed once.
        unsafe {
            ffi::MPI_Win_unlock_all(self.win);
            ffi::MPI_Win_free(&mut self.win);
        }
    }
}

/// Runs `iters` checked barriers on `comm`; ranks not in `comm` publish nothing, so the counts
/// belong to one communicator at a time (`base` is the count before the first barrier).
fn run(comm: &BarrierComm, counts: &Counts, iters: u64, base: u64, what: &str) {
    let seed = (comm.rank() as u64 + 1) * 0x9e37_79b9_7f4a_7c15;
    for i in 1..=iters {
        // Now and then a rank is late: the others must wait for it.
        let h = (seed ^ i).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 58;
        if h == 0 {
            std::thread::sleep(std::time::Duration::from_micros(50 + (seed % 200)));
        }
        counts.publish(base + i);
        if let Err(e) = comm.barrier() {
            barrier::text::say(&format!("mpi_barrier: rank {}: barrier {i} on {what} failed: {e}", comm.rank()));
            std::process::exit(1);
        }
        counts.check(base + i, what);
    }
}

/// After a set-up failure every rank says its own error (the rank where it happened says why),
/// then the ranks meet in MPI's barrier before they exit, so that mpirun does not kill a rank
/// for the first one's exit status before that rank has said why. Most set-up failures are
/// agreed (every rank gets one), but not all: the meeting gives up after a few seconds.
fn setup_failed(
    comm: &impl barrier_mpi::mpi::traits::CommunicatorCollectives,
    world_rank: i32,
    e: &impl std::fmt::Display,
) -> ! {
    barrier::text::say(&format!("mpi_barrier: rank {world_rank}: {e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut meeting = comm.immediate_barrier();
    loop {
        match meeting.test() {
            Ok(_) => std::process::exit(2),
            Err(pending) if std::time::Instant::now() < deadline => {
                meeting = pending;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // Exits with the request still pending (a dropped one would panic).
            Err(_pending) => std::process::exit(2),
        }
    }
}

/// `late-retry`: world rank 1 arrives at the first barrier three seconds late, and every rank
/// whose barrier fails (a timeout set on some ranks) calls it again, up to three times. No call
/// may return `Ok` before rank 1 has arrived (the counts say so); failing is fine.
fn late_retry(comm: &BarrierComm, counts: &Counts, world_rank: i32) {
    if world_rank == 1 {
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    counts.publish(1);
    for attempt in 1..=3 {
        match comm.barrier() {
            Ok(()) => {
                counts.check(1, "a retried barrier");
                println!("mpi_barrier: rank {world_rank}: barrier 1 completed on attempt {attempt}, after every rank arrived");
                return;
            }
            Err(e) => barrier::text::say(&format!(
                "mpi_barrier: rank {world_rank}: attempt {attempt} of barrier 1 failed: {e}"
            )),
        }
    }
}

/// `split-bench [CHUNK]`: each split-phase request type completed by `wait()` and by a
/// `while !request.test()? {}` loop, against the blocking barrier, timed in 21 alternating
/// chunks of CHUNK barriers (default 500); rank 0 prints each way's median per barrier and the
/// test loop over `wait()` (issue 41 item 1: when ranks outnumber cores, a test loop that never
/// gave the core away cost about 1,000 times a wait).
fn split_bench(comm: &BarrierComm, world: &barrier_mpi::mpi::topology::SimpleCommunicator) {
    use barrier_mpi::FastBarrier;
    let chunk: u64 = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(500);
    type Way<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let ways: Vec<Way<'_>> = vec![
        ("BarrierComm::barrier", Box::new(|| comm.barrier().expect("barrier"))),
        ("BarrierComm::ibarrier + wait", Box::new(|| comm.ibarrier().and_then(|r| r.wait()).expect("ibarrier"))),
        (
            "BarrierComm::ibarrier + test loop",
            Box::new(|| {
                let mut r = comm.ibarrier().expect("ibarrier");
                while !r.test().expect("test") {}
            }),
        ),
        (
            "immediate_fast_barrier + wait",
            Box::new(|| world.immediate_fast_barrier().and_then(|r| r.wait()).expect("immediate_fast_barrier")),
        ),
        (
            "immediate_fast_barrier + test loop",
            Box::new(|| {
                let mut r = world.immediate_fast_barrier().expect("immediate_fast_barrier");
                while !r.test().expect("test") {}
            }),
        ),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for round in 0..22 {
        for (i, (_, way)) in ways.iter().enumerate() {
            comm.barrier().expect("barrier");
            let start = std::time::Instant::now();
            for _ in 0..chunk {
                way();
            }
            // Round 0 warms up.
            if round > 0 {
                times[i].push(start.elapsed().as_nanos() as f64 / chunk as f64);
            }
        }
    }
    if comm.rank() == 0 {
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let medians: Vec<f64> = times.iter_mut().map(median).collect();
        println!(
            "split-bench: {} ranks, {} nodes, 21 chunks of {chunk} each, alternating: {}",
            comm.size(),
            comm.num_nodes(),
            comm.describe()
        );
        for ((name, _), m) in ways.iter().zip(&medians) {
            println!("{name:<36} median {m:>10.0} ns");
        }
        println!(
            "ratio test loop / wait: BarrierComm {:.2}, immediate_fast_barrier {:.2}",
            medians[2] / medians[1],
            medians[4] / medians[3]
        );
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let iters: u64 = mode.parse().unwrap_or(1000);
    let universe = barrier_mpi::mpi::initialize().expect("MPI_Init");
    let world = universe.world();
    let comm = BarrierComm::new(&world).unwrap_or_else(|e| setup_failed(&world, world.rank(), &e));
    if mode == "after-finalize" {
        // Issue 40 item 6: a barrier after MPI_Finalize is a clean error on every path (MPI
        // itself would abort the job).
        let rank = world.rank();
        drop(world);
        drop(universe);
        match comm.barrier() {
            Err(e) => println!("mpi_barrier: rank {rank}: a barrier after MPI_Finalize: {e}"),
            Ok(()) if comm.num_nodes() == 1 && comm.backend() != barrier_mpi::MPI_BACKEND => {
                println!("mpi_barrier: rank {rank}: a barrier after MPI_Finalize on one node: ok (no MPI needed)")
            }
            Ok(()) => {
                barrier::text::say(&format!(
                    "mpi_barrier: FAILED: rank {rank}: a barrier after MPI_Finalize called MPI and returned Ok"
                ));
                std::process::exit(1);
            }
        }
        match comm.ibarrier().and_then(|r| r.wait()) {
            Err(e) => println!("mpi_barrier: rank {rank}: a split-phase barrier after MPI_Finalize: {e}"),
            Ok(()) => println!("mpi_barrier: rank {rank}: a split-phase barrier after MPI_Finalize: ok"),
        }
        drop(comm);
        return;
    }
    if mode == "split-bench" {
        split_bench(&comm, &world);
        drop(comm);
        return;
    }
    if mode == "late-retry" {
        let machine = world.split_shared(world.rank());
        let counts = Counts::new(&machine);
        late_retry(&comm, &counts, world.rank());
        drop(comm);
        // Every rank is past its attempts before the window goes (MPI_Win_free is collective).
        barrier_mpi::mpi::traits::CommunicatorCollectives::barrier(&world);
        drop(counts);
        return;
    }
    if comm.rank() == 0 {
        println!("mpi_barrier: {} ranks, {} nodes: {}", comm.size(), comm.num_nodes(), comm.describe());
    }
    let machine = world.split_shared(world.rank());
    // All ranks of this check must be on one machine (they are under one mpirun here).
    let counts = Counts::new(&machine);
    run(&comm, &counts, iters, 0, "MPI_COMM_WORLD");

    // A split communicator: even and odd ranks, each with its own barrier communicator. The
    // counts of the other half stay put, so only this half's are checked.
    let half = world.split_by_color(barrier_mpi::mpi::topology::Color::with_value(world.rank() % 2)).expect("a color");
    let sub = BarrierComm::new(&half).unwrap_or_else(|e| setup_failed(&half, world.rank(), &e));
    let sub_counts = Counts::new(&half.split_shared(half.rank()));
    run(&sub, &sub_counts, iters / 2, 0, "a split communicator");
    drop(sub);
    drop(sub_counts);

    comm.barrier().expect("final barrier");
    println!(
        "mpi_barrier: rank {} of {}: {} checked barriers on {} (node {} of {}, {} network messages)",
        comm.rank(),
        comm.size(),
        iters + iters / 2,
        comm.backend(),
        comm.node(),
        comm.num_nodes(),
        comm.network_ops()
    );
    drop(comm);
    drop(counts);
}
