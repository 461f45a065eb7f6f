//! The OpenMP rows of `barrier bench`: `#pragma omp barrier` under GCC's libgomp and LLVM's
//! libomp, beside the thread rows (std, hurdles, sync, team) and taking turns with them.
//!
//! The harness (`c/omp_bench.c`, embedded in this binary) is built once per run with each
//! OpenMP compiler found (`gcc -fopenmp`, `clang -fopenmp`; a compiler or runtime that is
//! missing leaves its row out, with a line saying why) and run once per round and thread count
//! with `OMP_NUM_THREADS`, the runtime's other settings left at their defaults as a program
//! would have them. It times batches as the thread rows are timed (thread 0, once per batch of
//! barriers, after the same warm-up) and counts the process's context switches per barrier.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::stats::Stats;

/// The harness's source.
const SOURCE: &str = include_str!("../../c/omp_bench.c");

/// The OpenMP runtimes measured: (runtime, compiler, its flag that names the runtime, what to
/// install).
const RUNTIMES: [(&str, &str, &str, &str); 2] = [
    ("libgomp", "gcc", "-fopenmp", "gcc (GCC's libgomp comes with it)"),
    ("libomp", "clang", "-fopenmp=libomp", "clang and libomp-dev"),
];

/// One OpenMP runtime's harness, built.
#[derive(Debug)]
pub struct OpenMp {
    /// `libgomp` or `libomp`.
    pub runtime: &'static str,
    program: PathBuf,
}

/// The harnesses built in `dir` (made here, mode 0700; it must not exist yet) for every runtime
/// this machine has, and for each one that could not be built, its runtime and why.
pub fn build_all(dir: &Path) -> (Vec<OpenMp>, Vec<(&'static str, String)>) {
    let mut built = Vec::new();
    let mut missing = Vec::new();
    let src = dir.join("omp_bench.c");
    // A directory of this user's alone, new: a program built and run from a directory another
    // user made first could be theirs.
    let made = {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(dir)
    };
    if let Err(e) = made.and_then(|()| std::fs::write(&src, SOURCE)) {
        let why = format!("cannot write {}: {e}", src.display());
        return (built, RUNTIMES.iter().map(|r| (r.0, why.clone())).collect());
    }
    for (runtime, cc, flag, install) in RUNTIMES {
        let program = dir.join(format!("omp_bench_{runtime}"));
        let out = Command::new(cc).args(["-O2", flag, "-o"]).arg(&program).arg(&src).output();
        match out {
            Ok(o) if o.status.success() => built.push(OpenMp { runtime, program }),
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stderr);
                let first = text.lines().find(|l| l.contains("error")).unwrap_or("").trim().to_string();
                missing.push((runtime, format!("`{cc} {flag}` failed ({first}); install {install}")));
            }
            Err(e) => missing.push((runtime, format!("cannot run {cc} ({e}); install {install}"))),
        }
    }
    (built, missing)
}

impl OpenMp {
    /// The row's name (as [`Row::of_threads`](crate::record::Row::of_threads) labels it).
    pub fn label(&self) -> String {
        format!("openmp ({})", self.runtime)
    }

    /// `iters` barriers of `threads` OpenMP threads in batches of `batch`: thread 0's timings,
    /// and the context switches per barrier.
    pub fn measure(&self, threads: usize, iters: u64, batch: u64) -> Result<(Stats, f64), String> {
        let out = Command::new(&self.program)
            .arg(iters.to_string())
            .arg(batch.to_string())
            .env("OMP_NUM_THREADS", threads.to_string())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "the harness failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parse(&text, threads)
    }
}

/// The harness's report: its samples and switches, checked to be of `threads` threads.
fn parse(text: &str, threads: usize) -> Result<(Stats, f64), String> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name).map(str::trim));
    let got: usize = field("threads ").and_then(|v| v.parse().ok()).ok_or("the harness printed no thread count")?;
    if got != threads {
        return Err(format!("the runtime ran {got} threads, not {threads} (OMP_NUM_THREADS)"));
    }
    let switches: f64 = field("switches ").and_then(|v| v.parse().ok()).ok_or("the harness printed no switches")?;
    let samples: Vec<f64> = field("samples").unwrap_or("").split_whitespace().filter_map(|s| s.parse().ok()).collect();
    if samples.is_empty() {
        return Err("the harness printed no samples".into());
    }
    Ok((Stats::from_samples(samples), switches))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_read_and_checked() {
        let report = "threads 3\nswitches 0.0100\nruntime libgomp\nsamples 10.0 30.0 20.0\n";
        let (stats, switches) = parse(report, 3).expect("read");
        assert_eq!(stats.median, 20.0);
        assert_eq!(switches, 0.01);
        assert!(parse(report, 4).unwrap_err().contains("ran 3 threads, not 4"));
        assert!(parse("threads 3\nswitches 0\nsamples\n", 3).is_err());
    }

    /// Where GCC is installed (every machine this is built on has a C compiler for the C
    /// harnesses), its runtime's row measures a real barrier.
    #[test]
    fn libgomp_is_measured_where_gcc_is() {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("barrier-omp-test-{}-{stamp}", std::process::id()));
        let (built, missing) = build_all(&dir);
        if let Some(gomp) = built.iter().find(|b| b.runtime == "libgomp") {
            let (stats, _) = gomp.measure(2, 2_000, 100).expect("measured");
            assert!(stats.median > 0.0 && stats.median.is_finite(), "{stats:?}");
        } else {
            assert!(missing.iter().any(|(r, _)| *r == "libgomp"), "neither built nor said missing");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
