//! `barrier bench` and `barrier model` as users run them (the launcher's and the other
//! commands' tests are in `cli.rs`, the settings' in `settings.rs`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn barrier() -> Command {
    Command::new(env!("CARGO_BIN_EXE_barrier"))
}

#[test]
fn bench_json_has_the_reference_rows_and_fields() {
    let dir = std::env::temp_dir().join(format!("barrier-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("plot.svg");
    let out = barrier()
        .args(["bench", "-n", "2,3", "--iters", "2000", "--batch", "50", "--json", "--plot"])
        .arg(&plot)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    for backend in
        ["\"backend\":\"floor\"", "\"backend\":\"std\"", "\"backend\":\"hurdles\"", "\"backend\":\"dissemination\""]
    {
        assert!(lines.iter().any(|l| l.contains(backend)), "no {backend} row in {text}");
    }
    for l in &lines {
        for key in [
            "\"ranks\":",
            "\"iters\":",
            "\"median_ns\":",
            "\"p99_ns\":",
            "\"mean_ns\":",
            "\"min_ns\":",
            "\"switches_per_barrier\":",
            "\"switch_floor\":",
        ] {
            assert!(l.contains(key), "{l} lacks {key}");
        }
    }
    // A floor row at every rank count: a raw protocol's latency where the ranks fit the cores,
    // the context switches a barrier needs where they do not; every row of the count is a
    // multiple of its own floor.
    let cores = barrier::sys::available_cores();
    for n in [2usize, 3] {
        let floor = lines
            .iter()
            .find(|l| l.contains("\"backend\":\"floor\"") && l.contains(&format!("\"ranks\":{n},")))
            .unwrap_or_else(|| panic!("no floor row at {n} ranks in {text}"));
        let dissemination = lines
            .iter()
            .find(|l| l.contains("\"backend\":\"dissemination\"") && l.contains(&format!("\"ranks\":{n},")))
            .unwrap();
        if n <= cores {
            assert!(floor.contains("\"algorithm\":\"raw ") && !floor.contains("\"median_ns\":null"), "{floor}");
            assert!(!dissemination.contains("\"x_floor\":null"), "{dissemination}");
        } else {
            let want = format!("\"switches_per_barrier\":{}.00,\"switch_floor\":{}", n - cores, n - cores);
            assert!(floor.contains("\"median_ns\":null") && floor.contains(&want), "{floor}");
            assert!(dissemination.contains("\"x_floor\":null"), "{dissemination}");
            assert!(!dissemination.contains("\"switches_per_barrier\":null"), "{dissemination}");
        }
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{svg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_rejects_an_unknown_backend() {
    let out = barrier().args(["bench", "--backend", "warp-drive", "--iters", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "refused before anything ran");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend \"warp-drive\""));
}

#[test]
fn bench_rows_take_turns_in_rounds_and_pool_them() {
    let out = barrier()
        .args(["bench", "-n", "2", "--iters", "2050", "--batch", "50", "--rounds", "3", "--backend", "dissemination"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // 41 whole batches make 13 per round: 1950 barriers per row, not 2050.
    assert!(text.contains("1950 barriers per row in batches of 50 over 3 rounds taken in turn"), "{text}");
    let out = barrier()
        .args(["bench", "-n", "2", "--iters", "2050", "--batch", "50", "--rounds", "3", "--json"])
        .args(["--backend", "dissemination"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // Every row but the floor (which pools its own measurements) has its three rounds'
    // barriers; with 13 batches per round no p99 is meaningful.
    let rows: Vec<&str> = text.lines().filter(|l| !l.contains("\"backend\":\"floor\"")).collect();
    // std, hurdles, sync, team and the backend, and a row per OpenMP runtime this machine has.
    let openmp = rows.iter().filter(|l| l.contains("\"backend\":\"openmp\"")).count();
    assert!(openmp <= 2, "{text}");
    assert_eq!(rows.len(), 5 + openmp, "{text}");
    assert!(rows.iter().all(|l| l.contains("\"iters\":1950") && l.contains("\"p99_ns\":null")), "{text}");
}

#[test]
fn bench_refuses_meaningless_statistics_before_measuring() {
    for (args, needle) in [
        (&["bench", "-n", "2", "--iters", "1"][..], "a median needs at least 10"),
        (&["bench", "-n", "2", "--iters", "1000", "--batch", "50", "--rounds", "3"][..], "per round"),
        (&["bench", "-n", "2", "--rounds", "0"][..], "--rounds must be at least 1"),
        (
            &["bench", "-n", "2", "--iters", "100"][..],
            "1 timed batch(es) per round; a median needs at least 10: raise --iters, or lower --batch",
        ),
        (&["bench", "-n", "2", "--plot", "/nonexistent/dir/x.svg"][..], "checked before measuring"),
    ] {
        let start = Instant::now();
        let out = barrier().args(args).output().unwrap();
        assert!(start.elapsed() < Duration::from_secs(3), "{args:?} measured first");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // A setting every rank would refuse, before the references are measured.
    let start = Instant::now();
    let out = barrier().env("BARRIER_SW_TAIL_SPIN", "2s").args(["bench", "-n", "2"]).output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(3), "measured before refusing BARRIER_SW_TAIL_SPIN=2s");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("BARRIER_SW_TAIL_SPIN"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = barrier()
        .args(["bench", "-n", "1", "--iters", "2000", "--batch", "50", "--backend", "dissemination"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let one_rank: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("1 ")).collect();
    assert!(!one_rank.is_empty() && one_rank.iter().all(|l| l.split_whitespace().nth(7) == Some("-")), "{text}");
    assert!(
        text.contains("x floor -: a 1-rank barrier waits for nobody") && text.contains("p99 -: fewer than 100"),
        "{text}"
    );
}

#[test]
fn the_plot_says_what_the_table_says() {
    let dir = std::env::temp_dir().join(format!("barrier-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("p.svg");
    let cores = barrier::sys::available_cores();
    let n = (cores + 1).to_string();
    let out = barrier()
        .args([
            "bench",
            "-n",
            &format!("2,{n}"),
            "--iters",
            "2000",
            "--batch",
            "50",
            "--backend",
            "dissemination,switch",
            "--plot",
        ])
        .arg(&plot)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(&plot).unwrap();
    for needle in [
        ">floor</text>",     // the floor at each rank count, as a series
        "switch (emulated)", // emulated devices marked
        &format!("more ranks than the {cores} cores"),
        "median latency per barrier (ns)",        // the axis has a unit
        "<polygon points=",                       // a third series has a third marker shape
        "UTC; ",                                  // the caption: the date,
        "barriers per row in batches of 50 over", // the iterations and rounds
    ] {
        assert!(svg.contains(needle), "the plot lacks {needle}");
    }
    // The table says what each raw protocol measured, and what the switches column counts.
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("floor at 2 ranks: raw ") && table.contains("switches: context switches per barrier"),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn interleave_times_ours_against_the_floor_and_hurdles_side_by_side() {
    let out = barrier().args(["bench", "--interleave", "--iters", "20000", "--batch", "500"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for contender in ["floor", "ours", "hurdles"] {
        let line =
            text.lines().find(|l| l.starts_with(contender)).unwrap_or_else(|| panic!("no {contender} row: {text}"));
        let ns: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(ns > 0.0 && ns.is_finite(), "{line}");
    }
}

#[test]
fn options_that_interleave_and_mpi_would_ignore_are_refused() {
    for args in [
        &["bench", "--interleave", "--backend", "gba"][..],
        &["bench", "--interleave", "-n", "4"],
        &["bench", "--mpi", "--json"],
        &["bench", "--mpi", "--backend", "switch"],
        &["bench", "--mpi-preload", "/nonexistent.so"],
        &["bench", "--no-emulate", "--threaded-emulator"],
    ] {
        let out = barrier().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be used with") || err.contains("required arguments"), "{args:?}: {err}");
    }
}

#[test]
fn bench_mpi_refuses_an_interposer_built_without_mpi() {
    // A shared library that defines no MPI_Barrier: this test's own executable will do.
    let me = std::env::current_exe().unwrap();
    let out = barrier().args(["bench", "--mpi", "-n", "2", "--mpi-preload"]).arg(&me).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not define MPI_Barrier") && err.contains("--features mpi"), "{err}");
    // A path that is not there: named, with the build command and where the build puts it.
    let out = barrier()
        .args(["bench", "--mpi", "-n", "2", "--mpi-preload", "/nonexistent/libbarrier_pmpi.so"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no interposer at /nonexistent/libbarrier_pmpi.so (--mpi-preload)")
            && err.contains("target/release/"),
        "{err}"
    );
}

#[test]
fn bench_goes_on_past_a_backend_that_cannot_run_and_lists_it() {
    // a64fx needs two PEs per blade: at 1 rank it declines, and the other rows are still measured.
    let out =
        barrier().args(["bench", "-n", "1", "--iters", "2000", "--batch", "10", "--rounds", "1"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("not measured: a64fx at 1 ranks:") && text.contains("a blade needs at least 2 PEs"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.contains(" dissemination ")), "{text}");
    // Asked for by name, a backend that could not be measured fails the command after the table.
    let out = barrier()
        .args([
            "bench",
            "-n",
            "1",
            "--backend",
            "dissemination,a64fx",
            "--iters",
            "2000",
            "--batch",
            "10",
            "--rounds",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.lines().any(|l| l.contains(" dissemination ")) && text.contains("not measured: a64fx"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("could not be measured"), "{out:?}");
}

#[test]
fn sigint_to_bench_prints_the_rows_measured_until_then() {
    let child = barrier()
        .args([
            "bench",
            "-n",
            "2",
            "--backend",
            "dissemination",
            "--iters",
            "50000000",
            "--batch",
            "100",
            "--rounds",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reference rows take a moment; the dissemination row would take minutes.
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill with a pid of our own child and a valid signal number.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "bench took {:?} to stop", started.elapsed());
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert!(err.contains("interrupted by signal 2 (SIGINT)"), "{err}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("2  floor")), "{text}");
}

#[test]
fn model_predicts_every_backend_and_sweeps_to_4096_nodes() {
    // The built-in constants, not a calibration the developer stored.
    let empty_cache = std::env::temp_dir().join(format!("barrier-model-cache-{}", std::process::id()));
    let barrier = || {
        let mut command = barrier();
        command.env("XDG_CACHE_HOME", &empty_cache);
        command
    };
    let out = barrier().args(["model", "--nodes", "4096", "--ppn", "48", "--network", "ib-hdr"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for backend in [
        "a64fx",
        "gba",
        "switch",
        "hierarchical (switch among roots)",
        "hierarchical (dissemination among roots)",
        "dissemination",
    ] {
        assert!(text.lines().any(|l| l.starts_with(backend)), "{backend}: {text}");
    }
    assert!(text.contains("selector: hierarchical (switch among roots)"), "{text}");
    let dir = std::env::temp_dir().join(format!("barrier-model-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("sweep.svg");
    let out = barrier().args(["model", "--sweep", "--ppn", "48", "--plot"]).arg(&svg).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.trim_start().starts_with("4096 ")), "{text}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("polyline") && plot.contains(">nodes<"), "{plot}");
    std::fs::remove_dir_all(&dir).unwrap();
    let json = barrier().args(["model", "--nodes", "2", "--ppn", "2", "--json"]).output().unwrap();
    let json = String::from_utf8_lossy(&json.stdout);
    assert!(json.starts_with("{\"nodes\":2,\"ppn\":2") && json.contains("\"selector\":"), "{json}");
    for (args, needle) in [
        (&["model", "--network", "warp"][..], "use one of ib-hdr"),
        (&["model", "--ppn", "0"][..], "--ppn 0"),
        (&["model", "--devices", "tpu"][..], "--devices tpu"),
        (&["model", "--network", "sim:5us"][..], "above 20 µs"),
        (&["model", "--nodes", "4294967296", "--ppn", "2"][..], "more than the"),
        (&["model", "--sweep", "--nodes", "4"][..], "cannot be used with"),
        (&["model", "--check-mpi", "--layouts", "1x2"][..], "2 nodes or more"),
        (&["model", "--check-mpi", "--mpi-preload", "/nonexistent/libbarrier_pmpi.so"][..], "no interposer at"),
        (&["model", "--layouts", "2x1"][..], "--check-mpi"),
    ] {
        let out = barrier().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle), "{args:?}");
    }
}
