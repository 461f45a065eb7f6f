//! Set-up through OpenSHMEM alone, right after the implementation's own `shmem_init`, on every
//! PE; see the crate docs for the steps. Every step is taken by every PE, in the same order,
//! whatever happened before it on this PE: a local failure travels as a word of the next
//! exchange, so the PEs serve or decline together and nobody waits in an exchange alone.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use barrier::hierarchy::{set_up_node, Choice, Hierarchy, Layer, Node, NodeSpec, OwnBarrier, Roots, Way};
use barrier::shm::{JobShape, RankNames};
use barrier::{Params, Result};

use crate::real::{host_hash, Real};

use crate::serve::{Serving, ShmemOwn, ShmemRoots, LINE};
use crate::waits::Waits;

/// Words per PE in an exchange.
const WORDS: usize = 10;

use crate::settings::{INTERNODE, MPI_NODE_BLOCK, NODE_BLOCK, PROGRESS};

/// Symmetric memory this library allocated, freed at finalize: every allocation every PE made
/// (collectively), null ones included, so that every PE makes the same collective frees.
#[derive(Debug, Default)]
pub struct Symmetric {
    pub exchange: Option<usize>,
    pub inbox: Option<usize>,
}

impl Symmetric {
    /// Frees it (collective, as the allocation was; freeing null is allowed and does nothing).
    pub fn free(self, real: &Real) {
        for p in [self.inbox, self.exchange].into_iter().flatten() {
            // SAFETY: made by `shmem_align` on every PE (or null); every PE frees in this order.
            unsafe { (real.free)(p as *mut c_void) };
        }
    }
}

/// An allgather over OpenSHMEM: every PE puts its words into every PE's row of a symmetric
/// buffer, then the implementation's own barrier (after a quiet) makes them visible; a second
/// barrier keeps the next exchange from overwriting a row not yet read.
struct Exchange<'a> {
    real: &'a Real,
    buf: *mut u64,
    me: usize,
    n: usize,
    /// This PE's node's first PE, once the nodes are known: its words are its node's.
    first: usize,
}

impl Exchange<'_> {
    fn all(&self, words: &[u64]) -> Vec<[u64; WORDS]> {
        let mut row = [0u64; WORDS];
        row[..words.len().min(WORDS)].copy_from_slice(&words[..words.len().min(WORDS)]);
        for pe in 0..self.n {
            // SAFETY: `buf` is symmetric, n * WORDS words on every PE; row `me` is this PE's.
            unsafe {
                (self.real.putmem)(self.buf.add(self.me * WORDS).cast(), row.as_ptr().cast(), WORDS * 8, pe as i32)
            };
        }
        // SAFETY: the implementation's quiet and barrier, called by every PE.
        unsafe {
            (self.real.quiet)();
            (self.real.barrier_all)();
        }
        let all = (0..self.n)
            .map(|pe| {
                let mut r = [0u64; WORDS];
                for (w, slot) in r.iter_mut().enumerate() {
                    // SAFETY: inside the buffer; written by PE `pe` before the barrier.
                    *slot = unsafe { self.buf.add(pe * WORDS + w).read_volatile() };
                }
                r
            })
            .collect();
        // SAFETY: as above.
        unsafe { (self.real.barrier_all)() };
        all
    }

    /// The first PE that is not `ok` (a failure), if any.
    fn first_failed(&self, ok: bool) -> Option<usize> {
        self.all(&[u64::from(ok)]).iter().position(|w| w[0] == 0)
    }
}

impl barrier::hierarchy::Allgather for Exchange<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn allgather(&self, words: &[u64]) -> Result<Vec<Vec<u64>>> {
        if words.len() > WORDS {
            // Every PE asks the same (the core's layout): every PE declines alike.
            return Err(barrier::Error::Setup(format!("a set-up exchange of {} words (at most {WORDS})", words.len())));
        }
        Ok(self.all(words).into_iter().map(|row| row.to_vec()).collect())
    }
}

impl barrier::hierarchy::NodeExchange for Exchange<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn name(&self, id: usize) -> String {
        format!("PE {id}")
    }

    fn share_from_node_first(&self, words: &mut [u64; 5]) -> Result<()> {
        let all = self.all(&words[..]);
        words.copy_from_slice(&all[self.first][..5]);
        Ok(())
    }

    fn first_failed(&self, ok: bool) -> Result<Option<usize>> {
        Ok(Exchange::first_failed(self, ok))
    }
}

/// What the set-up decided on every PE alike.
#[derive(Debug)]
pub enum Outcome {
    /// Every PE serves its barriers with ours.
    Serve(Box<Serving>),
    /// Every PE passes every call through; the reason (printed once with BARRIER_VERBOSE).
    Decline(String),
}

/// The PEs' nodes: which PEs share one, by the host name each PE reported (`hashes`), cut into
/// blocks of `block` PEs per machine when simulated nodes are asked for. The node of each PE,
/// numbered by its first PE.
pub fn nodes(hashes: &[u64], block: usize) -> Vec<usize> {
    let mut keys: Vec<(u64, usize)> = Vec::with_capacity(hashes.len());
    let mut seen_on_host: Vec<(u64, usize)> = Vec::new();
    for &h in hashes {
        let index = match seen_on_host.iter_mut().find(|(x, _)| *x == h) {
            Some((_, count)) => {
                *count += 1;
                *count - 1
            }
            None => {
                seen_on_host.push((h, 1));
                0
            }
        };
        keys.push((h, index.checked_div(block).unwrap_or(0)));
    }
    barrier::hierarchy::number_nodes(&keys)
}

/// Runs the set-up (collective over every PE).
pub fn run(real: &Real, params: &Params) -> (Outcome, Symmetric) {
    // SAFETY: the implementation is initialized (our caller ran its init).
    let (me, n) = unsafe { ((real.my_pe)() as usize, (real.n_pes)() as usize) };
    let mut symmetric = Symmetric::default();
    // SAFETY: collective allocation, the same size on every PE.
    let buf = unsafe { (real.align)(LINE, n * WORDS * 8) } as *mut u64;
    symmetric.exchange = Some(buf as usize);
    // (A symmetric allocation fails on every PE alike: every PE computes the same heap offset.)
    if buf.is_null() {
        return (Outcome::Decline(format!("no symmetric memory for {} bytes of set-up", n * WORDS * 8)), symmetric);
    }
    let mut x = Exchange { real, buf, me, n, first: 0 };

    // 1. Settings, checked on every PE and agreed (the core's agreement: PE 0's node block,
    // timeout, stall report and way among the roots; `BARRIER_BACKEND`'s names).
    crate::settings::register();
    // BARRIER_SHMEM_NODE_BLOCK, or barrier-mpi's BARRIER_MPI_NODE_BLOCK when only that is set.
    let block_var = if params.get(NODE_BLOCK).is_some() { NODE_BLOCK } else { MPI_NODE_BLOCK };
    let layer = Layer {
        own_backend: None,
        node_block: block_var,
        internode: INTERNODE,
        internode_own: "shmem",
        extra_check: None,
    };
    let agreed = match barrier::hierarchy::agree_settings(&x, params, &layer) {
        Ok(agreed) => agreed,
        Err(e @ barrier::Error::PeerInvalidParam { .. }) => return (Outcome::Decline(e.to_string()), symmetric),
        Err(e) => return (Outcome::Decline(format!("PE {me}: {e}")), symmetric),
    };
    // The machines: each PE's host and the CPUs it may use (the first 256): the job's PEs on a
    // machine wait by the cores they may use together, not by one PE's mask (a launcher binds
    // each PE to one core).
    let mask: [u64; 4] = barrier::sys::affinity_words();
    let verdicts = x.all(&[host_hash(), mask[0], mask[1], mask[2], mask[3]]);
    let hashes: Vec<u64> = verdicts.iter().map(|w| w[0]).collect();
    let block = agreed.node_block;
    // PE 0's timeout and stall report are every PE's (one PE's own short BARRIER_TIMEOUT ended
    // a job across nodes: issue 40 item 7), on its node's universe too.
    let (timeout, stall) = (agreed.timeout, agreed.stall);
    let params = &agreed.node_params(params, &layer);
    let node_of = nodes(&hashes, block);
    let on_machine = hashes.iter().filter(|&&h| h == hashes[me]).count();
    let members: Vec<usize> = (0..n).filter(|&pe| node_of[pe] == node_of[me]).collect();
    x.first = members[0];
    let local_rank = members.iter().position(|&pe| pe == me).expect("this PE is on its node");
    let node_count = node_of.iter().max().map_or(1, |m| m + 1);
    let roots: Vec<usize> =
        (0..node_count).map(|node| (0..n).find(|&pe| node_of[pe] == node).expect("a node has a PE")).collect();

    // 2. The node (the core's set-up over the exchange): its segment, made by its first PE;
    // its universe, which every PE joins (the core selector picks the node's backend); across
    // nodes, its gather and release (or a forced backend's barrier). Waits let the
    // implementation progress (see the crate docs), unless turned off.
    let cores = barrier::sys::cores_in((0..n).filter(|&pe| hashes[pe] == hashes[me]).map(|pe| &verdicts[pe][1..5]));
    let shape = JobShape { world_size: members.len(), nodes: 1, ranks_on_machine: on_machine, cores };
    let progress = match real.progress {
        Some(progress) if params.flag_or(PROGRESS, true).unwrap_or(true) => {
            crate::progress::set_progress(progress);
            Some(barrier::wait::Progress::new(crate::progress::call_progress, 0))
        }
        _ => None,
    };
    let spec = NodeSpec {
        local_rank,
        shape,
        params: params.clone(),
        progress,
        names: RankNames { world: members.clone(), comm: members.clone(), comm_size: n, hierarchical: node_count > 1 },
        across_nodes: node_count > 1,
    };
    let node = match set_up_node(&x, spec) {
        Ok(node) => node,
        Err(failed) => return (Outcome::Decline(failed.error.to_string()), symmetric),
    };
    let alone = node.alone() && node_count > 1;
    let Node { seg, universe: node, halves, forced } = node;
    // The node's table of active sets (collective over the node's PEs; agreed across nodes).
    let table = node.world().shared_window(crate::sets::table_words(members.len()));
    if let Some(pe) = x.first_failed(table.is_ok()) {
        let why = table.err().map_or_else(|| format!("PE {pe} could not make its node's table"), |e| e.to_string());
        return (Outcome::Decline(why), symmetric);
    }
    let table = table.expect("agreed");

    let waits = Waits { pace: barrier::wait::Pace::for_machine(shape.ranks_on_machine, shape.cores), timeout, stall };
    // 4. Between nodes: the roots' link, OpenSHMEM atomics into a symmetric inbox.
    let rounds = barrier::rounds(node_count);
    let mut link = None;
    if rounds > 0 {
        let bytes = ShmemRoots::inbox_bytes(node_count);
        // SAFETY: collective allocation, the same size on every PE.
        let inbox = unsafe { (real.align)(LINE, bytes) } as usize;
        symmetric.inbox = Some(inbox);
        if inbox != 0 {
            for w in 0..bytes / 8 {
                // SAFETY: this PE's own inbox, zeroed before anyone signals it (the exchange
                // below is a barrier of the implementation's).
                unsafe { (*((inbox + w * 8) as *const AtomicU64)).store(0, Ordering::Relaxed) };
            }
        }
        if let Some(pe) = x.first_failed(inbox != 0) {
            return (Outcome::Decline(format!("PE {pe} had no symmetric memory for the internode inbox")), symmetric);
        }
        if let Some(j) = roots.iter().position(|&pe| pe == me) {
            let node_pes = (0..node_count).map(|k| (0..n).filter(|&pe| node_of[pe] == k).collect()).collect();
            link = Some(ShmemRoots::new(*real, inbox, j, roots.clone(), node_pes, me));
        }
    }
    let describe = format!(
        "{} PEs on {node_count} node(s): intranode {} ({}{}), {}{}",
        n,
        halves.as_ref().map_or_else(|| node.world().backend(), |h| h.backend()),
        halves.as_ref().map_or_else(|| node.world().algorithm(), |h| h.algorithm()),
        if forced && halves.is_some() {
            "; forced by BARRIER_BACKEND: two node barriers around the roots' phase"
        } else {
            ""
        },
        if node_count > 1 { "internode dissemination over OpenSHMEM puts among the node roots, " } else { "" },
        format_args!(
            "waits {} ({} PEs on {} cores here)",
            node.world().wait_policy(),
            shape.ranks_on_machine,
            shape.cores
        )
    );
    // 5. How the roots meet. Where every node has one PE, the roots' rounds are the whole
    // barrier, and the implementation's own may be faster over its network: PE 0's
    // BARRIER_SHMEM_INTERNODE decides, `auto` by timing both (unless a timeout or stall report
    // asks for ours, whose reports name the PE waited for); the composer times them.
    let one_each = node_count == n && n > 1;
    let choice = if one_each { agreed.internode } else { Choice::Fixed(Way::Ours) };
    let mut roots_phase = link.map(|link| {
        let names = link.names(n);
        let own = one_each.then(|| Box::new(ShmemOwn(*real)) as Box<dyn OwnBarrier>);
        Roots::new(link, own, names, waits)
    });
    let chosen = roots_phase.as_mut().map(|r| {
        r.choose(choice, |words| {
            let said = x.all(&words[..]);
            words.copy_from_slice(&said[0][..3]);
            Ok(())
        })
    });
    let chosen = match chosen.transpose() {
        Ok(c) => c,
        // No timeout is set where it times, so our barrier fails only for a PE that left,
        // which cannot happen inside shmem_init; were it to, the PEs would be out of step: end
        // the job as a failed barrier does.
        Err(e) => crate::waits::end_job(real, "timing our barrier in shmem_init", &e.into()),
    };
    let hier = halves.map(|h| Hierarchy::new(h, roots_phase, Some(seg.clone()), alone, me, "BARRIER_TIMEOUT".into()));
    let sets = crate::serve::SetServing { sets: crate::sets::Sets::new(table, members), node_of, me, waits };
    let mut serving = Serving { sets: std::sync::Arc::new(sets), hier, node, _seg: seg, describe, delegated: false };
    if let Some(chosen) = chosen.filter(|_| one_each) {
        let own = |why: &str| {
            format!("{n} PEs on {node_count} nodes of one PE each: the implementation's own barriers serve, {why}")
        };
        let us = |d: std::time::Duration| d.as_nanos() as f64 / 1e3;
        match (chosen.way, chosen.timed) {
            (Way::Own, None) => serving.delegate(own("BARRIER_SHMEM_INTERNODE=shmem")),
            (Way::Own, Some((ours, theirs))) => serving.delegate(own(&format!(
                "the faster ({:.1}µs a shmem_barrier_all when timed, against ours {:.1}µs)",
                us(theirs),
                us(ours)
            ))),
            (Way::Ours, Some((ours, theirs))) => serving.say_also(&format!(
                "one PE per node: ours, the faster ({:.1}µs a shmem_barrier_all when timed, against the \
                 implementation's {:.1}µs)",
                us(ours),
                us(theirs)
            )),
            (Way::Ours, None) if chosen.untimed_for_reports => serving.say_also(
                "ours, untimed: BARRIER_TIMEOUT or BARRIER_STALL_REPORT is set, whose reports name the PE waited for",
            ),
            (Way::Ours, None) => serving.say_also("one PE per node: ours (BARRIER_SHMEM_INTERNODE=dissemination)"),
        }
    }
    (Outcome::Serve(Box::new(serving)), symmetric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_hosts_cut_into_blocks_numbered_by_their_first_pe() {
        let (a, b) = (11, 22);
        assert_eq!(nodes(&[a, a, b, b], 0), vec![0, 0, 1, 1]);
        assert_eq!(nodes(&[a, b, a, b], 0), vec![0, 1, 0, 1]);
        assert_eq!(nodes(&[a, a, a, a, a], 2), vec![0, 0, 1, 1, 2]);
        assert_eq!(nodes(&[a, b, a, b, a], 1), vec![0, 1, 2, 3, 4]);
    }
}
