//! The reference rows measured in the same run as the backends: the floor (two pinned threads
//! handing an epoch back and forth), `std::sync::Barrier` and `hurdles::Barrier`, and the
//! interleaved comparison of ours, the floor protocol and hurdles (`--interleave`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use barrier::pad::CachePadded;

use super::stats::{timed_batches, Stats};

/// The floor: two pinned threads, each storing its epoch on its own line, waiting for the other's.
pub fn floor(iters: u64, batch: u64) -> Stats {
    let cores = barrier::sys::affinity_cores();
    let lines: Arc<[CachePadded<AtomicU64>; 2]> = Arc::new(Default::default());
    let warmup = iters / 10;
    let peer = {
        let lines = lines.clone();
        let core = cores.get(1).copied().unwrap_or(0);
        std::thread::spawn(move || {
            let _ = barrier::sys::pin_to_core(core);
            let total = warmup + (iters / batch).max(1) * batch;
            for e in 1..=total {
                lines[1].store(e, Ordering::Release);
                while lines[0].load(Ordering::Acquire) < e {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let before = barrier::sys::affinity_cores();
    let _ = barrier::sys::pin_to_core(cores.first().copied().unwrap_or(0));
    let mut e = 0u64;
    let mut step = || {
        e += 1;
        lines[0].store(e, Ordering::Release);
        while lines[1].load(Ordering::Acquire) < e {
            std::hint::spin_loop();
        }
    };
    for _ in 0..warmup {
        step();
    }
    let samples = timed_batches(iters, batch, step);
    peer.join().expect("floor peer thread");
    // Restore the mask: the ranks launched later inherit this thread's affinity.
    let _ = barrier::sys::set_affinity(&before);
    Stats::from_samples(samples)
}

/// A thread barrier with `n` threads, each waiting through its own `waiter()`; thread 0's
/// timings. A signal (Ctrl-C) stops every thread after the same number of waits: thread 0
/// sets a limit two batches ahead of its own count, and no thread can be a whole batch ahead of
/// another (they are in one barrier), so every thread sees the limit in time.
fn thread_barrier<W: FnMut() + Send + 'static>(n: usize, iters: u64, batch: u64, waiter: impl Fn() -> W) -> Stats {
    // Whole batches of warm-up: the timed batches then start on a batch boundary, all of them.
    let warmup = (iters / 10).min(10_000).next_multiple_of(batch);
    let batches = (iters / batch).max(1);
    let total = warmup + batches * batch;
    let limit = Arc::new(AtomicU64::new(u64::MAX));
    let others: Vec<_> = (1..n)
        .map(|_| {
            let mut wait = waiter();
            let limit = limit.clone();
            std::thread::spawn(move || {
                for i in 0..total {
                    if i % batch == 0 && i / batch >= limit.load(Ordering::Acquire) {
                        break;
                    }
                    wait();
                }
            })
        })
        .collect();
    let mut wait = waiter();
    let mut samples = Vec::with_capacity(batches as usize);
    let mut i = 0;
    while i < total {
        if i % batch == 0 {
            if limit.load(Ordering::Relaxed) == u64::MAX && crate::signals::peek().is_some() {
                limit.store(i / batch + 2, Ordering::Release);
            }
            if i / batch >= limit.load(Ordering::Relaxed) {
                break;
            }
        }
        // A batch is timed whole, from a boundary, once the warm-up is over.
        if i < warmup {
            wait();
            i += 1;
            continue;
        }
        let t = Instant::now();
        for _ in 0..batch {
            wait();
        }
        samples.push(t.elapsed().as_nanos() as f64 / batch as f64);
        i += batch;
    }
    for t in others {
        t.join().expect("reference barrier thread");
    }
    if samples.is_empty() {
        samples.push(f64::NAN);
    }
    Stats::from_samples(samples)
}

/// `std::sync::Barrier` with `n` threads; thread 0's timings.
pub fn std_barrier(n: usize, iters: u64, batch: u64) -> Stats {
    let b = Arc::new(std::sync::Barrier::new(n));
    thread_barrier(n, iters, batch, || {
        let b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// `hurdles::Barrier` (the fastest Rust barrier crate measured here) with `n` threads; thread
/// 0's timings.
pub fn hurdles_barrier(n: usize, iters: u64, batch: u64) -> Stats {
    let b = hurdles::Barrier::new(n);
    thread_barrier(n, iters, batch, || {
        let mut b = b.clone();
        move || {
            b.wait();
        }
    })
}

/// Per-chunk latencies (ns per barrier) of the three contenders of [`interleave`].
#[derive(Debug, Clone, Default)]
pub struct Interleaved {
    /// The raw floor protocol.
    pub floor: Vec<f64>,
    /// This library's barrier (`Communicator::barrier`, thread mode, as configured).
    pub ours: Vec<f64>,
    /// `hurdles::Barrier`.
    pub hurdles: Vec<f64>,
}

/// Ours against the raw floor protocol and hurdles, timed chunk by chunk in the same two
/// threads pinned to two cores: on a machine whose speed changes from one moment to the next,
/// only figures taken side by side like this compare. The order of the three rotates every
/// chunk, and the communicator's barrier lines the threads up before each timed chunk.
pub fn interleave(chunks: usize, per_chunk: u64, params: barrier::Params) -> Result<Interleaved, String> {
    let cores = barrier::sys::affinity_cores();
    if cores.len() < 2 {
        return Err("--interleave needs two cores (the floor is a two-party protocol)".into());
    }
    let lines: [CachePadded<AtomicU64>; 2] = Default::default();
    let hb = hurdles::Barrier::new(2);
    let out = barrier::threads::Job::new(2)
        .params(params)
        .run(|w| -> Result<Interleaved, barrier::Error> {
            let me = w.rank();
            let _ = barrier::sys::pin_to_core(cores[me]);
            let mut hb = hb.clone();
            let mut epoch = 0u64;
            let mut times = Interleaved::default();
            for chunk in 0..chunks + 1 {
                for turn in 0..3 {
                    w.barrier()?;
                    let t = Instant::now();
                    match (chunk + turn) % 3 {
                        0 => {
                            for _ in 0..per_chunk {
                                epoch += 1;
                                lines[me].store(epoch, Ordering::Release);
                                while lines[1 - me].load(Ordering::Acquire) < epoch {
                                    std::hint::spin_loop();
                                }
                            }
                        }
                        1 => {
                            for _ in 0..per_chunk {
                                w.barrier()?;
                            }
                        }
                        _ => {
                            for _ in 0..per_chunk {
                                hb.wait();
                            }
                        }
                    }
                    let ns = t.elapsed().as_nanos() as f64 / per_chunk as f64;
                    // The first round warms up caches and the branch predictors: not kept.
                    if chunk > 0 {
                        match (chunk + turn) % 3 {
                            0 => times.floor.push(ns),
                            1 => times.ours.push(ns),
                            _ => times.hurdles.push(ns),
                        }
                    }
                }
            }
            Ok(times)
        })
        .map_err(|e| e.to_string())?;
    out.into_iter().next().expect("rank 0").map_err(|e| e.to_string())
}

/// The median of per-chunk ratios `a[i] / b[i]`, and their range.
pub fn ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(|x, y| x.total_cmp(y));
    (r[r.len() / 2], r[0], r[r.len() - 1])
}

/// Runs and prints `barrier bench --interleave`.
pub fn run_interleave(iters: u64, chunk: u64) -> Result<(), String> {
    let chunks = (iters / chunk.max(1)).max(10) as usize;
    let t = interleave(chunks, chunk, barrier::Params::from_env())?;
    let med = |v: &[f64]| Stats::from_samples(v.to_vec()).median;
    println!(
        "barrier bench --interleave: 2 threads pinned to 2 cores, {chunks} chunks of {chunk} barriers per contender, order rotating"
    );
    println!("{:<12} {:>10} {:>22}", "contender", "median ns", "x floor (median, range)");
    println!("{:<12} {:>10.1} {:>22}", "floor", med(&t.floor), "1.00");
    for (name, v) in [("ours", &t.ours), ("hurdles", &t.hurdles)] {
        let (m, lo, hi) = ratio(v, &t.floor);
        println!("{:<12} {:>10.1} {:>10.3} ({lo:.2}-{hi:.2})", name, med(v), m);
    }
    Ok(())
}
