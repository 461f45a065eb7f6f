//! Criterion benches: barrier latency with ranks as threads, beside the floor and
//! `std::sync::Barrier`. `barrier bench` measures the same with ranks as processes.
//!
//! `cargo bench` (criterion's options after `--`: `cargo bench -- --warm-up-time 1
//! --measurement-time 2 floor`), or `cargo bench --bench barrier`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use barrier::pad::CachePadded;
use barrier::{threads::Job, Params};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// `iters` barriers of the software backend with `algo` on `n` threads; rank 0's time.
fn software(n: usize, algo: &str, iters: u64) -> Duration {
    let params = Params::defaults_only().set("BARRIER_SW_ALGORITHM", algo);
    let times = Job::new(n)
        .params(params)
        .run(|w| {
            if n <= barrier::sys::available_cores() {
                let _ = barrier::sys::pin_to_core(w.rank());
            }
            w.barrier().unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                w.barrier().unwrap();
            }
            start.elapsed()
        })
        .unwrap();
    times[0]
}

/// Two pinned threads storing their epoch into their own line and waiting for the other's.
/// The clock starts only once both threads are pinned and have met (epoch 1), so neither the
/// helper's spawn nor its move to its core is timed.
fn floor(iters: u64) -> Duration {
    let lines: Arc<[CachePadded<AtomicU64>; 2]> = Arc::new(Default::default());
    let peer = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            let _ = barrier::sys::pin_to_core(1);
            for e in 1..=iters + 1 {
                lines[1].store(e, Ordering::Release);
                while lines[0].load(Ordering::Acquire) < e {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let before = barrier::sys::affinity_cores();
    let _ = barrier::sys::pin_to_core(0);
    let mut start = Instant::now();
    for e in 1..=iters + 1 {
        lines[0].store(e, Ordering::Release);
        while lines[1].load(Ordering::Acquire) < e {
            std::hint::spin_loop();
        }
        if e == 1 {
            // Met: both threads are pinned and running.
            start = Instant::now();
        }
    }
    let took = start.elapsed();
    peer.join().unwrap();
    let _ = barrier::sys::set_affinity(&before);
    took
}

fn std_barrier(n: usize, iters: u64) -> Duration {
    let b = Arc::new(std::sync::Barrier::new(n));
    let others: Vec<_> = (1..n)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                for _ in 0..iters {
                    b.wait();
                }
            })
        })
        .collect();
    let start = Instant::now();
    for _ in 0..iters {
        b.wait();
    }
    let took = start.elapsed();
    others.into_iter().for_each(|t| t.join().unwrap());
    took
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("barrier");
    g.bench_function("floor/2", |b| b.iter_custom(floor));
    for n in [2usize, 4] {
        g.bench_with_input(BenchmarkId::new("std", n), &n, |b, &n| b.iter_custom(|iters| std_barrier(n, iters)));
        for algo in ["central", "dissemination", "tournament", "tree"] {
            g.bench_with_input(BenchmarkId::new(algo, n), &n, |b, &n| b.iter_custom(|iters| software(n, algo, iters)));
        }
    }
    g.finish();
}

criterion_group! {
    name = barrier_benches;
    // Defaults that the command line overrides (`cargo bench -- --measurement-time 2`).
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    targets = benches
}
criterion_main!(barrier_benches);
