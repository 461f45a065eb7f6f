//! `barrier model --calibrate`: this machine's constants, measured.

use std::time::{Duration, Instant};

use super::predict::Machine;

/// Measures this machine's constants (about a second).
pub fn calibrate() -> Result<Machine, String> {
    let cores = barrier::sys::affinity_cores();
    // On one core a spinning ping-pong would hand over only at preemptions: yield there.
    let flag_ns = match cores.get(1) {
        Some(&second) => pingpong(cores.first().copied(), Some(second), Wait::Spin, 200_000),
        None => pingpong(cores.first().copied(), cores.first().copied(), Wait::Yield, 20_000),
    };
    let yield_ns = pingpong(cores.first().copied(), cores.first().copied(), Wait::Yield, 20_000);
    let wake_ns = pingpong(cores.first().copied(), cores.get(1).copied(), Wait::Park, 20_000);
    let device_ns = device_work()?;
    Ok(Machine {
        flag_ns,
        wake_ns,
        yield_ns,
        device_ns,
        cores: cores.len(),
        source: format!("calibrated {} on {} cores", crate::record::today_utc(), cores.len()),
    })
}

/// This machine's constants, with the flag hand-off and the cost of a context switch read from
/// `barrier bench --json` output (`text`) instead of measured: the flag hand-off is the floor's
/// median at 2 ranks (the best raw protocol there, dissemination flags: one store and one wait,
/// one hand-off); a switch
/// is the least, over the library's rows with more ranks than cores, of the median per barrier
/// divided by the switches per barrier the kernel counted. The futex wake and the emulated
/// device are measured as `--calibrate` measures them (which measures the other two as well,
/// and drops them: a second's work, not worth a second way to measure).
pub fn calibrate_from_bench(text: &str) -> Result<Machine, String> {
    let rows: Vec<BenchRow> =
        text.lines().filter(|l| l.trim_start().starts_with('{')).filter_map(BenchRow::parse).collect();
    if rows.is_empty() {
        return Err("no rows of `barrier bench --json` in it".into());
    }
    let flag_ns = rows
        .iter()
        .find(|r| r.backend == "floor" && r.ranks == 2)
        .and_then(|r| r.median_ns)
        .ok_or("no floor row at 2 ranks (run `barrier bench -n 2,... --json`)")?;
    let reference = ["floor", "std", "hurdles", "sync", "team"];
    let yield_ns = rows
        .iter()
        .filter(|r| !reference.contains(&r.backend.as_str()) && r.switch_floor.is_some())
        .filter_map(|r| Some(r.median_ns? / r.switches.filter(|&s| s > 0.0)?))
        .min_by(f64::total_cmp)
        .ok_or(
            "no row with more ranks than cores and its switches (run `barrier bench -n ... --json` with such a count)",
        )?;
    // The bench's machine: a row's switch floor is its ranks less that machine's cores.
    let cores = rows
        .iter()
        .find_map(|r| r.switch_floor.map(|f| r.ranks.saturating_sub(f as usize)))
        .filter(|&c| c >= 1)
        .ok_or("no row says how many cores the bench had (a switch floor below its rank count)")?;
    // The futex wake and the device are this machine's, measured as `--calibrate` does.
    let measured = calibrate()?;
    Ok(Machine {
        flag_ns,
        yield_ns,
        cores,
        source: format!("{}; flag and switch from barrier bench on {cores} cores", measured.source),
        ..measured
    })
}

/// The fields of a `barrier bench --json` line that the calibration reads.
#[derive(Debug, PartialEq)]
struct BenchRow {
    backend: String,
    ranks: usize,
    median_ns: Option<f64>,
    switches: Option<f64>,
    switch_floor: Option<f64>,
}

impl BenchRow {
    fn parse(line: &str) -> Option<BenchRow> {
        // The bench writes flat objects of strings and numbers: `"key":value` pairs.
        let field = |key: &str| -> Option<&str> {
            let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
            let rest = line[at..].trim_start();
            let end = if let Some(quoted) = rest.strip_prefix('"') {
                return quoted.find('"').map(|e| &quoted[..e]);
            } else {
                rest.find([',', '}']).unwrap_or(rest.len())
            };
            Some(rest[..end].trim())
        };
        let number = |key: &str| field(key).and_then(|v| v.parse::<f64>().ok());
        Some(BenchRow {
            backend: field("backend")?.to_string(),
            ranks: field("ranks")?.parse().ok()?,
            median_ns: number("median_ns"),
            switches: number("switches_per_barrier"),
            switch_floor: number("switch_floor"),
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Wait {
    Spin,
    Yield,
    Park,
}

/// One-way hand-off time between two threads on `a` and `b`, by ping-pong: half the round trip.
fn pingpong(a: Option<usize>, b: Option<usize>, wait: Wait, trips: u64) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let ball = Arc::new(AtomicU64::new(0));
    let pin = |cpu: Option<usize>| {
        if let Some(cpu) = cpu {
            let _ = barrier::sys::set_affinity(&[cpu]);
        }
    };
    let main = std::thread::current();
    let other = {
        let ball = ball.clone();
        std::thread::spawn(move || {
            pin(b);
            for i in 0..trips {
                let want = 2 * i + 1;
                loop {
                    match ball.load(Ordering::Acquire) {
                        u64::MAX => return, // stopped at the deadline
                        seen if seen == want => break,
                        _ => {}
                    }
                    match wait {
                        Wait::Spin => std::hint::spin_loop(),
                        Wait::Yield => std::thread::yield_now(),
                        Wait::Park => std::thread::park(),
                    }
                }
                ball.store(want + 1, Ordering::Release);
                if wait == Wait::Park {
                    main.unpark();
                }
            }
        })
    };
    let whole = barrier::sys::affinity_cores();
    pin(a);
    let start = Instant::now();
    // A deadline: on a machine that gives these threads less than it says, each trip could
    // wait for a time slice.
    let deadline = start + Duration::from_secs(1);
    let mut done = trips;
    for i in 0..trips {
        if i % 64 == 0 && Instant::now() > deadline {
            done = i;
            // The partner waits for this trip: tell it to stop instead.
            ball.store(u64::MAX, Ordering::Release);
            if wait == Wait::Park {
                other.thread().unpark();
            }
            break;
        }
        ball.store(2 * i + 1, Ordering::Release);
        if wait == Wait::Park {
            other.thread().unpark();
        }
        while ball.load(Ordering::Acquire) != 2 * i + 2 {
            match wait {
                Wait::Spin => std::hint::spin_loop(),
                Wait::Yield => std::thread::yield_now(),
                Wait::Park => std::thread::park_timeout(Duration::from_millis(1)),
            }
        }
    }
    let elapsed = start.elapsed();
    let _ = other.join();
    let _ = barrier::sys::set_affinity(&whole);
    elapsed.as_nanos() as f64 / done.max(1) as f64 / 2.0
}

/// The emulated device's work per barrier: an inline GBA's busy time over 2 thread ranks.
fn device_work() -> Result<f64, String> {
    let emu = barrier_emu::Emulator::start(barrier_emu::Config::new(&barrier_hw::GBA).inline())
        .map_err(|e| format!("cannot start an emulated GBA: {e}"))?;
    let params = barrier::Params::defaults_only()
        .set("BARRIER_BACKEND", "gba")
        .set("BARRIER_GBA_DEVICE_PATH", emu.path().display().to_string());
    let before = emu.counters();
    barrier::threads::Job::new(2)
        .params(params)
        .run(|w| -> barrier::Result<()> {
            for _ in 0..20_000 {
                w.barrier()?;
            }
            Ok(())
        })
        .map_err(|e| format!("calibrating the emulated GBA: {e}"))?
        .into_iter()
        .collect::<Result<Vec<()>, _>>()
        .map_err(|e| format!("calibrating the emulated GBA: {e}"))?;
    emu.quiesce(Duration::from_secs(2));
    let after = emu.counters();
    let barriers = after.barriers.saturating_sub(before.barriers).max(1);
    Ok(after.busy_ns.saturating_sub(before.busy_ns) as f64 / barriers as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_rows_are_read_with_their_nulls() {
        let line = r#"{"backend":"floor","algorithm":"4 ranks on 2 cores: 2 switch(es)","ranks":4,"iters":0,"median_ns":null,"switches_per_barrier":2.00,"switch_floor":2}"#;
        // Spaces after the colons (a reformatted file) read the same.
        let spaced = line.replace("\":", "\": ");
        assert_eq!(BenchRow::parse(&spaced), BenchRow::parse(line));
        let row = BenchRow::parse(line).unwrap();
        assert_eq!(
            row,
            BenchRow {
                backend: "floor".into(),
                ranks: 4,
                median_ns: None,
                switches: Some(2.0),
                switch_floor: Some(2.0)
            }
        );
        assert!(calibrate_from_bench("not json").unwrap_err().contains("no rows"));
        let only_floor =
            r#"{"backend":"floor","ranks":2,"median_ns":40.0,"switches_per_barrier":0.00,"switch_floor":null}"#;
        assert!(calibrate_from_bench(only_floor).unwrap_err().contains("more ranks than cores"));
    }
}
