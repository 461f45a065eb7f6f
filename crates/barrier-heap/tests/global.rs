//! The heap as a program's global allocator: std's collections, threads and strings run on it,
//! and the process's `malloc` heap does not grow by what they hold (the property the interposer
//! and the components need: a program's heap looks the same with our library loaded).

#[global_allocator]
static HEAP: barrier_heap::PrivateHeap = barrier_heap::PrivateHeap::new();

/// Bytes in use in glibc's heaps (every arena), from `mallinfo2`.
fn malloc_in_use() -> usize {
    // SAFETY: mallinfo2 only reads glibc's counters.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

#[test]
fn std_runs_on_it_and_the_malloc_heap_stays_as_it_was() {
    let before = malloc_in_use();
    let mut held: Vec<String> = Vec::new();
    let mut map = std::collections::HashMap::new();
    for i in 0..20_000 {
        held.push(format!("communicator {i}"));
        map.insert(i, vec![i as u8; i % 300]);
    }
    let big = vec![7u64; 1 << 20];
    let sums: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> =
            (0..3).map(|t| s.spawn(move || (0..10_000).map(|i| format!("{t}:{i}").len()).sum())).collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let grown = malloc_in_use().saturating_sub(before);
    // What the workload holds: about 8 MB of `big`, 3 MB of vectors, 20,000 strings. glibc's own
    // use in the meantime (a thread's stack bookkeeping) is a few kilobytes.
    assert!(grown < 64 * 1024, "the malloc heap grew by {grown} bytes while the workload ran on the private heap");
    assert_eq!(held.len(), 20_000);
    assert_eq!(map[&299].len(), 299);
    assert_eq!(big.iter().sum::<u64>(), 7 << 20);
    assert_eq!(sums.len(), 3);
}
