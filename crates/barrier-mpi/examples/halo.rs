//! An rsmpi program of the usual shape, a 1-D stencil (heat equation) with a halo exchange per
//! step, that synchronises with our barrier through the `FastBarrier` trait: blocking on even
//! steps, split-phase (overlapping the step's residual) on odd ones, and on a split communicator
//! (even and odd ranks) every few steps. It checks itself:
//!
//! * **the barriers**: every rank reads the machine's monotonic clock just before each barrier
//!   and just after it; afterwards, for every barrier, the earliest departure must come after
//!   the latest arrival (ranks of one machine share that clock), or a rank left early;
//! * **the halo exchange**: rank 0 gathers the field and compares it, bit for bit, with the
//!   same steps computed serially.
//!
//! ```sh
//! cargo build --release -p barrier-mpi --features mpi --example halo
//! mpirun -np 4 target/release/examples/halo 400
//! BARRIER_MPI_NODE_BLOCK=2 mpirun -np 4 target/release/examples/halo 400   # across "nodes"
//! ```

use std::process::ExitCode;

use barrier_mpi::FastBarrier;
use mpi::point_to_point as p2p;
use mpi::topology::Color;
use mpi::traits::*;

/// Cells per rank.
const CELLS: usize = 64;
/// Every this many steps, a barrier on the split communicator too.
const SPLIT_EVERY: usize = 5;

/// The machine's monotonic clock in ns (one clock for every process of the machine).
fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One explicit step of the heat equation on `u` with its two ghost cells.
fn step(u: &[f64], left: f64, right: f64) -> Vec<f64> {
    (0..u.len())
        .map(|i| {
            let l = if i == 0 { left } else { u[i - 1] };
            let r = if i + 1 == u.len() { right } else { u[i + 1] };
            u[i] + 0.25 * (l - 2.0 * u[i] + r)
        })
        .collect()
}

/// The field at the start: a bump and a slope, different on every cell.
fn initial(global: usize) -> f64 {
    (global % 17) as f64 + if global.is_multiple_of(29) { 100.0 } else { 0.0 }
}

/// A barrier's arrival and departure times on this rank.
#[derive(Default)]
struct Times {
    arrive: Vec<u64>,
    leave: Vec<u64>,
}

impl Times {
    /// Checks, over every rank of `comm`, that no rank left a barrier before the last arrived.
    fn check(&self, comm: &impl Communicator, what: &str) -> Result<(), String> {
        let n = comm.size() as usize;
        let k = self.arrive.len();
        let mut arrive = vec![0u64; n * k];
        let mut leave = vec![0u64; n * k];
        comm.all_gather_into(&self.arrive[..], &mut arrive[..]);
        comm.all_gather_into(&self.leave[..], &mut leave[..]);
        for b in 0..k {
            let last_in = (0..n).map(|r| arrive[r * k + b]).max().unwrap_or(0);
            let (first_out_rank, first_out) =
                (0..n).map(|r| (r, leave[r * k + b])).min_by_key(|&(_, t)| t).unwrap_or((0, u64::MAX));
            if first_out < last_in {
                return Err(format!(
                    "{what}: barrier {b}: rank {first_out_rank} left {} ns before the last rank arrived",
                    last_in - first_out
                ));
            }
        }
        Ok(())
    }
}

/// A short, rank-dependent delay before some barriers, so that arrivals spread out.
fn jitter(rank: usize, step: usize) {
    let h = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (step as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    if h.is_multiple_of(7) {
        std::thread::sleep(std::time::Duration::from_micros(h % 200));
    }
}

fn run(steps: usize) -> Result<String, String> {
    let universe = barrier_mpi::initialize().ok_or("MPI was initialized already")?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let fail = |e: barrier_mpi::Error| e.to_string();
    let half = world.split_by_color(Color::with_value((rank % 2) as i32)).ok_or("no split communicator")?;
    let left = world.process_at_rank(((rank + size - 1) % size) as i32);
    let right = world.process_at_rank(((rank + 1) % size) as i32);

    let mut u: Vec<f64> = (0..CELLS).map(|i| initial(rank * CELLS + i)).collect();
    let (mut times, mut half_times) = (Times::default(), Times::default());
    for s in 0..steps {
        // The halo exchange: my first cell goes left while the right neighbour's first arrives.
        let mut ghost_right = 0.0f64;
        let mut ghost_left = 0.0f64;
        p2p::send_receive_into(&u[0], &left, &mut ghost_right, &right);
        p2p::send_receive_into(&u[CELLS - 1], &right, &mut ghost_left, &left);
        let next = step(&u, ghost_left, ghost_right);

        jitter(rank, s);
        times.arrive.push(now_ns());
        if s % 2 == 0 {
            world.fast_barrier().map_err(fail)?;
        } else {
            // Split phase: arrive, overlap the step's residual, then complete.
            let mut request = world.immediate_fast_barrier().map_err(fail)?;
            let residual: f64 = next.iter().zip(&u).map(|(a, b)| (a - b).abs()).sum();
            std::hint::black_box(residual);
            while !request.test().map_err(fail)? {
                std::hint::spin_loop();
            }
        }
        times.leave.push(now_ns());
        u = next;

        if s % SPLIT_EVERY == 0 {
            jitter(rank + size, s);
            half_times.arrive.push(now_ns());
            half.fast_barrier().map_err(fail)?;
            half_times.leave.push(now_ns());
        }
    }
    times.check(&world, "world")?;
    half_times.check(&half, "split communicator")?;

    // The field against the same steps run serially on rank 0.
    let root = world.process_at_rank(0);
    let describe = world.fast_barrier_describe().map_err(fail)?;
    let describe = describe.split("; declined").next().unwrap_or(&describe);
    if rank == 0 {
        let mut field = vec![0f64; CELLS * size];
        root.gather_into_root(&u[..], &mut field[..]);
        let mut serial: Vec<f64> = (0..CELLS * size).map(initial).collect();
        for _ in 0..steps {
            let (l, r) = (serial[serial.len() - 1], serial[0]);
            serial = step(&serial, l, r);
        }
        if let Some(i) = (0..field.len()).find(|&i| field[i].to_bits() != serial[i].to_bits()) {
            return Err(format!("the field differs from the serial run at cell {i}: {} != {}", field[i], serial[i]));
        }
        Ok(format!(
            "halo: {size} ranks, {steps} steps, {} barriers checked on the world and {} on the split: field exact; {describe}",
            times.arrive.len(),
            half_times.arrive.len()
        ))
    } else {
        root.gather_into(&u[..]);
        Ok(String::new())
    }
}

fn main() -> ExitCode {
    let steps = std::env::args().nth(1).map_or(Ok(200), |a| a.parse()).unwrap_or(0);
    if steps == 0 {
        barrier::text::say("usage: halo [STEPS]   (STEPS at least 1)");
        return ExitCode::from(2);
    }
    match run(steps) {
        Ok(line) => {
            if !line.is_empty() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            barrier::text::say(&format!("halo: FAILED: {e}"));
            ExitCode::from(1)
        }
    }
}
