//! A BSP-style iterative program of the kind HPC codes are: 1-D heat diffusion (Jacobi) over a
//! global array split into one block per rank.
//!
//! Every step: **compute** the new interior of the own block, **barrier**, **exchange** the
//! boundary cells with the neighbours through shared memory, **barrier** (so no rank overwrites
//! a halo another rank has not read yet). At the end every rank writes its block to a shared
//! result and rank 0 checks it, bit for bit, against the same computation done serially.
//!
//! `barrier run -n 4 -- target/release/examples/bsp [CELLS] [STEPS]`

use std::sync::atomic::Ordering;

const ALPHA: f64 = 0.25;

fn initial(i: usize, cells: usize) -> f64 {
    if i == 0 {
        100.0
    } else if i == cells - 1 {
        -50.0
    } else {
        ((i * 7919) % 101) as f64 / 10.0
    }
}

fn step(old: &[f64], new: &mut [f64], left: f64, right: f64) {
    for i in 0..old.len() {
        let l = if i == 0 { left } else { old[i - 1] };
        let r = if i + 1 == old.len() { right } else { old[i + 1] };
        new[i] = old[i] + ALPHA * (l - 2.0 * old[i] + r);
    }
}

fn serial(cells: usize, steps: usize) -> Vec<f64> {
    let mut cur: Vec<f64> = (0..cells).map(|i| initial(i, cells)).collect();
    let mut next = cur.clone();
    for _ in 0..steps {
        step(&cur[1..cells - 1], &mut next[1..cells - 1], cur[0], cur[cells - 1]);
        std::mem::swap(&mut cur, &mut next);
    }
    cur
}

fn main() -> Result<(), barrier::Report> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("CELLS and STEPS are numbers"));
    let cells = args.next().unwrap_or(1000).max(3);
    let steps = args.next().unwrap_or(500);
    let universe = barrier::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    // Interior cells 1..cells-1 are split into n blocks; the two ends are fixed boundaries.
    let interior = cells - 2;
    let lo = 1 + interior * me / n;
    let hi = 1 + interior * (me + 1) / n;
    // halos[2r] = rank r's first cell, halos[2r+1] = its last cell.
    let halos = world.shared_window(2 * n)?;
    let result = world.shared_window(cells)?;
    let mut cur: Vec<f64> = (lo..hi).map(|i| initial(i, cells)).collect();
    let mut next = cur.clone();
    let publish = |block: &[f64]| {
        if let (Some(first), Some(last)) = (block.first(), block.last()) {
            halos.words()[2 * me].store(first.to_bits(), Ordering::Relaxed);
            halos.words()[2 * me + 1].store(last.to_bits(), Ordering::Relaxed);
        }
    };
    // The value left of `lo` and right of `hi - 1`: a neighbour's published edge, or a boundary.
    let neighbour = |rank: Option<usize>, word: usize, boundary: usize| match rank {
        Some(r) if (1 + interior * r / n) < (1 + interior * (r + 1) / n) => {
            f64::from_bits(halos.words()[2 * r + word].load(Ordering::Relaxed))
        }
        _ => initial(boundary, cells),
    };
    let left_rank = (0..me).rev().find(|&r| interior * r / n < interior * (r + 1) / n);
    let right_rank = (me + 1..n).find(|&r| interior * r / n < interior * (r + 1) / n);
    publish(&cur);
    world.barrier()?;
    for _ in 0..steps {
        // exchange: read the neighbours' edges of the previous step
        let left = neighbour(left_rank, 1, 0);
        let right = neighbour(right_rank, 0, cells - 1);
        world.barrier()?;
        // compute, then publish the new edges for the next exchange
        step(&cur, &mut next, left, right);
        std::mem::swap(&mut cur, &mut next);
        publish(&cur);
        world.barrier()?;
    }
    for (i, v) in (lo..hi).zip(&cur) {
        result.words()[i].store(v.to_bits(), Ordering::Relaxed);
    }
    world.barrier()?;
    if me == 0 {
        let expect = serial(cells, steps);
        for (i, e) in expect.iter().enumerate().take(cells - 1).skip(1) {
            let got = f64::from_bits(result.words()[i].load(Ordering::Relaxed));
            assert_eq!(got.to_bits(), e.to_bits(), "cell {i}: parallel {got} != serial {e}");
        }
        println!("bsp: {n} ranks, {cells} cells, {steps} steps: identical to the serial result");
    }
    world.barrier()?;
    Ok(())
}
