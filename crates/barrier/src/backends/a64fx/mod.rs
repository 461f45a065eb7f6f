//! The A64FX hardware barrier (`a64fx`): barrier blades per CMG, window registers per PE.
//!
//! # What the hardware does
//!
//! Each of the chip's 4 CMGs has 6 barrier blades; each PE has 4 window registers. A blade has
//! a MASK (one bit per physical PE taking part), a BST bit per PE and one LBSY bit; a window
//! connects its PE to one blade. A barrier is `fhwb_sync`: read LBSY through the window, write
//! its inverse as this PE's BST, wait until LBSY equals what was written. LBSY flips when every
//! BST bit in MASK equals the inverse of LBSY, that is, when the last PE has arrived
//! (`barrier_hw::a64fx` has the registers and the rule).
//!
//! # Control plane (collective, when a communicator is created)
//!
//! 1. Every rank opens the device (one open per process, shared by its threads: the driver ties
//!    blades to the fd that allocated them) and asks the driver for its PE (`GET_PE_INFO`): the
//!    rank's thread must be bound to exactly one CPU (`threads::Job::pin_cpus`). Every rank
//!    publishes (CPU, CMG, PE); no two ranks may share a PE, and every CMG spanned must hold at
//!    least 2 ranks (a blade's mask needs 2 PEs).
//! 2. The lowest rank of each CMG allocates a blade for its CMG's CPUs (`BB_ALLOC`) and
//!    publishes its number; every rank then connects a free window of its PE to it
//!    (`BW_ASSIGN`, window −1).
//! 3. When the communicator spans CMGs, the CMG leaders (the lowest rank of each) set up
//!    put-based dissemination among themselves over the transports
//!    (`algo::dissemination::FabricDissemination`, as the hierarchical backend's node roots do), with CMGs
//!    in the role of nodes.
//!
//! Every step's outcome is agreed (an allgather) before the next, so a failure on one rank
//! (no free blade, no free window, an unbound thread) is a decline on all of them and the
//! selector falls back to the next backend together. What was allocated is released.
//!
//! # Data plane (every barrier)
//!
//! * One CMG: one `fhwb_sync` on the rank's window.
//! * Several CMGs: a hardware sync (everyone in the CMG has arrived), then the leaders'
//!   dissemination at epoch `e`, then a second hardware sync that the leader joins only after
//!   its dissemination is done, so nobody in a CMG leaves before every CMG has arrived.
//!
//! Waiting: on the emulated node the blade counts LBSY flips in a flag, which the communicator's
//! wait policy spins, yields or parks on (more ranks than cores must not spin for ever); on
//! hardware each thread owns its PE and polls the window.
//!
//! # Ownership and teardown
//!
//! A blade belongs to the process that allocated it, so this backend serves communicators
//! whose ranks are threads of one process (the hybrid layout A64FX systems run: a process per
//! CMG or node, a thread per PE); process ranks decline. A dropped communicator disconnects each
//! rank's window (from that rank's thread, as the driver requires) and the last user of a blade
//! frees it. A process that dies without doing so loses its blades and windows to the driver
//! (the emulated node frees them when it sees the process's lock on the device gone).
//!
//! # What is tested without hardware
//!
//! Everything but `real.rs`'s register access and ioctls runs in CI against the emulated node
//! (`barrier_emu::a64fx`), which serves the same driver calls with the real driver's checks and
//! error codes and implements the blade rule in the writer's context. `real.rs` is small,
//! compile-gated to aarch64 for the registers, and untested on an A64FX.

mod device;
mod driver;
mod emulated;
mod real;
mod sysfs;
mod window;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use barrier_hw::a64fx::errno;

use crate::algo::dissemination::FabricDissemination;
use crate::algo::topology::Topology;
use crate::backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
use crate::error::Error;
use crate::params::{ParamInfo, ParamKind, Params};
use crate::wait::Flag;

use device::{Assignment, BladeHold, Device};
use window::Window;

pub use sysfs::{CmgInfo, NodeInfo};

/// The device path parameter.
pub const DEVICE_PATH: &str = "BARRIER_A64FX_DEVICE_PATH";
/// The sysfs tree parameter.
pub const SYSFS: &str = "BARRIER_A64FX_SYSFS";
/// The emulated node's CMGs (read by whoever starts one: `barrier run`, `barrier bench`).
pub const EMU_CMGS: &str = "BARRIER_A64FX_EMU_CMGS";
/// The emulated node's PEs per CMG.
pub const EMU_PES: &str = "BARRIER_A64FX_EMU_PES";

/// The A64FX hardware-barrier backend (priority 110: on its machines nothing is faster).
#[derive(Debug)]
pub struct A64fx;

/// The backend instance.
pub static A64FX: A64fx = A64fx;

/// The device file from the parameters.
pub fn device_path(params: &Params) -> PathBuf {
    PathBuf::from(params.get(DEVICE_PATH).unwrap_or_else(|| barrier_hw::a64fx::DEVICE_PATH.into()))
}

/// The sysfs tree from the parameters.
pub fn sysfs_path(params: &Params) -> PathBuf {
    PathBuf::from(params.get(SYSFS).unwrap_or_else(|| barrier_hw::a64fx::SYSFS_PATH.into()))
}

/// The node as its driver's sysfs tree shows it, if there is one.
pub fn node_info(params: &Params) -> Result<NodeInfo, String> {
    NodeInfo::read(&sysfs_path(params))
}

impl Backend for A64fx {
    fn name(&self) -> &'static str {
        "a64fx"
    }

    fn default_priority(&self) -> i32 {
        110
    }

    fn description(&self) -> &'static str {
        "A64FX hardware barrier: a barrier blade per CMG, a window register per PE (threads of one process)"
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo::new(DEVICE_PATH, barrier_hw::a64fx::DEVICE_PATH, "The hardware-barrier driver's device file."),
            ParamInfo::new(
                SYSFS,
                barrier_hw::a64fx::SYSFS_PATH,
                "The driver's sysfs tree (node shape, CPUs, free blades).",
            ),
            ParamInfo::new(
                EMU_CMGS,
                "4",
                "CMGs of an emulated node started by `barrier run --emulate a64fx` or `barrier bench`.",
            )
            .kind(ParamKind::Int { min: 1, max: 8 }),
            ParamInfo::new(EMU_PES, "12", "PEs per CMG of an emulated node.").kind(ParamKind::Int { min: 2, max: 13 }),
        ]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        if !ctx.one_process {
            return Err(Decline::new(
                "the ranks are separate processes, and an A64FX barrier blade belongs to the process that allocated \
                 it: this backend serves ranks that are threads of one process (a process per CMG or node, a thread \
                 per PE)",
            ));
        }
        if ctx.nodes > 1 {
            return Err(Decline::new(format!(
                "the communicator spans {} nodes, and barrier blades synchronise PEs of one chip",
                ctx.nodes
            )));
        }
        let path = device_path(ctx.params);
        if !path.exists() {
            return Err(Decline::new(format!(
                "no A64FX barrier device at {} (set {DEVICE_PATH}, or run under `barrier run --emulate a64fx`)",
                path.display()
            )));
        }
        // A rank per PE: more ranks than the node has PEs cannot all have one (checked here,
        // before the binding each rank's enable checks, which could not be right for them all).
        if let Ok(node) = node_info(ctx.params) {
            let pes: usize = node.cmgs.iter().map(|c| c.pes.len()).sum();
            if ctx.size > pes {
                return Err(Decline::new(format!(
                    "the communicator has {} ranks and the node {pes} PEs ({} CMGs): the hardware barrier needs a PE \
                     per rank, so at most {pes} thread ranks can use it (split the communicator, for example a \
                     communicator per CMG)",
                    ctx.size,
                    node.cmgs.len()
                )));
            }
        }
        Ok(())
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        enable(ctx).map(|m| Box::new(m) as Box<dyn Module>)
    }
}

/// Window reads a rank makes on hardware before returning to the communicator's wait.
const HARDWARE_POLLS: u32 = 4096;

/// What each rank publishes in step 1.
struct Placement {
    cpu: usize,
    cmg: usize,
    ppe: usize,
}

fn enable(ctx: &EnableContext<'_>) -> Result<A64fxModule, Decline> {
    let q = &ctx.query;
    let coll = |e: Error| Decline::new(e.to_string());

    // 1. The device and this rank's PE.
    let local = (|| -> Result<(Arc<Device>, Placement), String> {
        let dev = Device::open(&device_path(q.params))?;
        let cpu = dev.driver.caller_cpu().ok_or_else(|| {
            format!(
                "rank {}'s thread is not bound to one CPU: the hardware barrier works per PE, so bind each rank to its \
                 own (threads::Job::pin_cpus, or OMP_PROC_BIND=close with OMP_PLACES=cores)",
                q.rank
            )
        })?;
        let (cmg, ppe) =
            dev.driver.pe_info().map_err(|e| format!("fhwb_get_pe_info on CPU {cpu} failed: {}", driver_error(e)))?;
        Ok((dev, Placement { cpu, cmg: cmg.into(), ppe: ppe.into() }))
    })();
    let words = match &local {
        Ok((_, p)) => [1, p.cpu as u64, p.cmg as u64, p.ppe as u64],
        Err(_) => [0; 4],
    };
    let all = ctx.allgather(&words).map_err(coll)?;
    if let Some(r) = all.iter().position(|w| w[0] == 0) {
        return Err(Decline::new(match &local {
            Err(e) => e.clone(),
            Ok(_) => format!("rank {r} cannot use the A64FX barrier (its own report says why)"),
        }));
    }
    let (dev, me) = local.map_err(Decline::new)?;
    let place: Vec<Placement> =
        all.iter().map(|w| Placement { cpu: w[1] as usize, cmg: w[2] as usize, ppe: w[3] as usize }).collect();
    check_placement(&place)?;

    // 2. A blade per CMG, allocated by the CMG's lowest rank.
    let cmg_of: Vec<usize> = place.iter().map(|p| p.cmg).collect();
    let mates: Vec<usize> = (0..q.size).filter(|&r| cmg_of[r] == me.cmg).collect();
    let leader = mates[0];
    let allocation = (leader == q.rank).then(|| dev.alloc(&mates.iter().map(|&r| place[r].cpu).collect::<Vec<_>>()));
    let words = match &allocation {
        Some(Ok(h)) => [1, u64::from(h.bb), 0],
        Some(Err(e)) => [0, 0, *e as u64],
        None => [2, 0, 0],
    };
    let all = ctx.allgather(&words).map_err(coll)?;
    if let Some(r) = all.iter().position(|w| w[0] == 0) {
        let c = cmg_of[r];
        return Err(Decline::new(match all[r][2] as i32 {
            errno::EBUSY => format!(
                "every barrier blade of CMG {c} is in use (fhwb_init: -EBUSY): other communicators or processes hold \
                 them all"
            ),
            e => format!("allocating a barrier blade in CMG {c} failed (fhwb_init: {})", driver_error(e)),
        }));
    }
    let bb = all[leader][1] as u8;
    let allocation: Option<BladeHold> = allocation.and_then(Result::ok);

    // 3. A window of every rank's PE, connected to its CMG's blade.
    let assignment = Assignment::new(&dev, me.cmg as u8, bb, me.ppe as u8);
    let words = match &assignment {
        Ok(_) => [1, 0],
        Err(e) => [0, *e as u64],
    };
    let all = ctx.allgather(&words).map_err(coll)?;
    if let Some(r) = all.iter().position(|w| w[0] == 0) {
        let (c, p) = (cmg_of[r], place[r].ppe);
        return Err(Decline::new(match all[r][1] as i32 {
            errno::EBUSY => format!(
                "PE {p} of CMG {c} (rank {r}) has no free barrier window (fhwb_assign: -EBUSY): all of its windows \
                 are in use"
            ),
            e => {
                format!("connecting a window of PE {p} in CMG {c} (rank {r}) failed (fhwb_assign: {})", driver_error(e))
            }
        }));
    }
    let assignment = assignment.map_err(|_| Decline::new("window assignment failed"))?;

    // 4. Across CMGs: dissemination among the CMG leaders.
    let cmgs = {
        let mut c = cmg_of.clone();
        c.sort_unstable();
        c.dedup();
        c.len()
    };
    let leaders = if cmgs > 1 {
        let fabric = ctx.fabric();
        if !ctx.all_agree(fabric.is_ok()).map_err(coll)? {
            return Err(Decline::new(fabric.err().map_or_else(
                || "another rank could not set up its transports for the CMG leaders".into(),
                |e| format!("the CMG leaders' transports: {e}"),
            )));
        }
        FabricDissemination::enable(ctx, &fabric.map_err(coll)?, Topology::new(&cmg_of, q.rank, 2).roots())?
    } else {
        None
    };
    tracing::debug!(
        "a64fx: rank {} on blade {bb} of CMG {}, window {} of PE {}, {}",
        q.rank,
        me.cmg,
        assignment.number,
        me.ppe,
        dev.driver.describe()
    );
    Ok(A64fxModule {
        spans: cmgs > 1,
        leaders,
        phase: Phase::Done,
        wrote: false,
        wake: ctx.policy.wakes(),
        idle: Flag::default(),
        assignment,
        _allocation: allocation,
        algorithm: if cmgs > 1 { format!("blades x{cmgs} + dissemination") } else { "blade".into() },
    })
}

/// A driver call's error for a message: `-NAME`, and for a timeout what it means.
fn driver_error(e: driver::Errno) -> String {
    match e {
        errno::ETIMEDOUT => "-ETIMEDOUT: the driver did not answer within its limit (an emulated node's agent thread \
                             that exited or gets no CPU: more busy threads than cores)"
            .into(),
        e => format!("-{}", errno::name(e)),
    }
}

/// Declines placements the hardware cannot serve: two ranks on one PE, a CMG with one rank.
fn check_placement(place: &[Placement]) -> Result<(), Decline> {
    for (a, pa) in place.iter().enumerate() {
        if let Some(b) = place[a + 1..].iter().position(|pb| (pb.cmg, pb.ppe) == (pa.cmg, pa.ppe)) {
            return Err(Decline::new(format!(
                "ranks {a} and {} are both on PE {} of CMG {} (CPU {}): a blade has one BST bit per PE, so every rank \
                 needs its own PE",
                a + 1 + b,
                pa.ppe,
                pa.cmg,
                pa.cpu
            )));
        }
        if place.iter().filter(|p| p.cmg == pa.cmg).count() < 2 {
            return Err(Decline::new(format!(
                "rank {a} is the communicator's only rank on CMG {}: a blade needs at least 2 PEs, so every CMG the \
                 communicator spans needs 2 of its ranks or more",
                pa.cmg
            )));
        }
    }
    Ok(())
}

/// Where a rank is in one barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The first hardware sync (the only one within one CMG).
    Gather,
    /// A leader's dissemination among the CMG leaders.
    Leaders,
    /// The second hardware sync, across CMGs.
    Release,
    /// Nothing under way.
    Done,
}

/// One rank's barrier module.
#[derive(Debug)]
pub struct A64fxModule {
    spans: bool,
    leaders: Option<FabricDissemination>,
    phase: Phase,
    /// The BST value written by the sync under way (the LBSY it waits for).
    wrote: bool,
    wake: bool,
    /// Waited on (with a recheck) where the window has no flips flag: real hardware.
    idle: Flag,
    assignment: Assignment,
    /// The leader's share of its CMG's blade (dropped after the window: see `driver`).
    _allocation: Option<BladeHold>,
    algorithm: String,
}

impl A64fxModule {
    /// `fhwb_sync`, first half: read LBSY, write its inverse.
    #[inline]
    fn sync_start(&mut self) {
        let w = &self.assignment.window;
        self.wrote = !w.lbsy();
        w.write_bst(self.wrote);
    }

    /// `fhwb_sync`, second half, without blocking: `None` once LBSY equals what was written,
    /// else what to wait on.
    #[inline]
    fn sync_pending(window: &Window, wrote: bool, idle: &Flag) -> Option<(*const Flag, u64)> {
        // The flips count first, then LBSY: a flip after this load raises the count past it,
        // so a waiter that saw the old LBSY cannot sleep through the flip.
        let Some(flips) = window.flips() else {
            // Hardware: every thread owns its PE, so poll the window (as `fhwb_sync` does)
            // before handing the wait to the communicator, whose recheck costs microseconds.
            for _ in 0..HARDWARE_POLLS {
                if window.lbsy() == wrote {
                    return None;
                }
                std::hint::spin_loop();
            }
            return Some((idle as *const Flag, 1));
        };
        let target = flips.load() + 1;
        if window.lbsy() == wrote {
            return None;
        }
        Some((flips as *const Flag, target))
    }

    /// The poll result for a sync that [`Self::sync_pending`] found pending.
    fn wait_for(&self, (flag, target): (*const Flag, u64)) -> Poll<'_> {
        let recheck = self.assignment.window.flips().is_none().then_some(Duration::ZERO);
        // SAFETY: the pointer is to the window's flips flag (alive as long as the window,
        // which `self` owns) or to `self.idle`; both outlive the returned borrow of `self`.
        let flag = unsafe { &*flag };
        Poll::Pending { flag, target, recheck, last: false, spin: None, park: false }
    }
}

impl Module for A64fxModule {
    fn algorithm(&self) -> &str {
        &self.algorithm
    }

    fn arrive(&mut self, _epoch: u64) -> Result<(), Error> {
        self.sync_start();
        self.phase = Phase::Gather;
        Ok(())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        loop {
            match self.phase {
                Phase::Gather => {
                    if let Some(wait) = Self::sync_pending(&self.assignment.window, self.wrote, &self.idle) {
                        return Ok(self.wait_for(wait));
                    }
                    if !self.spans {
                        self.phase = Phase::Done;
                        return Ok(Poll::Ready);
                    }
                    match self.leaders.as_mut() {
                        Some(l) => {
                            l.start(epoch, self.wake)?;
                            self.phase = Phase::Leaders;
                        }
                        None => {
                            self.sync_start();
                            self.phase = Phase::Release;
                        }
                    }
                }
                Phase::Leaders => {
                    let leaders = self.leaders.as_mut().expect("only leaders disseminate");
                    if let Some((flag, _)) = leaders.progress(epoch, self.wake)? {
                        let flag: *const Flag = flag;
                        // SAFETY: the slot belongs to `self.leaders`, alive as long as `self`.
                        let flag = unsafe { &*flag };
                        return Ok(Poll::pending(flag, epoch));
                    }
                    self.sync_start();
                    self.phase = Phase::Release;
                }
                Phase::Release => {
                    if let Some(wait) = Self::sync_pending(&self.assignment.window, self.wrote, &self.idle) {
                        return Ok(self.wait_for(wait));
                    }
                    self.phase = Phase::Done;
                    return Ok(Poll::Ready);
                }
                Phase::Done => return Ok(Poll::Ready),
            }
        }
    }
}
