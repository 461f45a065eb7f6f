//! The software backend (`dissemination`): barriers over shared memory that work everywhere.
//!
//! It offers several algorithms, like OpenSHMEM's basic collectives, chosen with
//! `BARRIER_SW_ALGORITHM`. All of them signal by storing an epoch into a flag that one rank
//! writes, and wait until a flag reaches at least the current epoch; no flag is ever reset.
//!
//! * **central**: a cumulative arrival counter. Barrier `e` is complete when the counter
//!   reaches `n * e`; the rank whose `fetch_add` makes it so stores `e` into the release flag
//!   that everyone else polls. One shared RMW line plus one broadcast line: cheapest when the
//!   ranks are few and when ranks park (one futex wake releases everybody).
//! * **dissemination**: ⌈log2 n⌉ rounds; in round `r` rank `i` stores `e` into the round-`r`
//!   flag of rank `(i + 2^r) mod n` and waits for its own round-`r` flag to reach `e`. Works
//!   for any `n`. Every flag has one writer (`(i - 2^r) mod n`).
//! * **tournament**: in round `r` the rank whose low `r+1` bits are zero waits for its opponent
//!   `i + 2^r` (if it exists) to store `e` into its round-`r` flag; the loser stores and then
//!   waits for the champion (rank 0) to store `e` into one release flag.
//! * **tree**: a k-ary tree (`BARRIER_TREE_ARITY`, default 4). Each rank waits for its children's
//!   up-flags, stores its own up-flag, waits for its down-flag, and stores its children's
//!   down-flags.
//!
//! Why `>= e` is enough, even for the fallback: a rank only ever stores epoch `e` after it has
//! itself arrived at `e`, and a rank reaching `e + 1` implies that every rank arrived at `e`.
//! So any flag value `>= e` carries at least the knowledge the algorithm needs for epoch `e`,
//! and a module can start at any epoch (the slot-based algorithms, dissemination in particular,
//! are what a failed hardware backend falls back to).

use crate::backend::{Backend, Decline, EnableContext, Module, Poll, QueryContext};
use crate::error::Error;
use crate::params::ParamInfo;
use crate::region::Region;

/// The software barrier algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Pick by communicator size and wait policy (see [`Algorithm::resolve`]).
    Auto,
    /// Cumulative counter plus release flag.
    Central,
    /// ⌈log2 n⌉ rounds of pairwise flags.
    Dissemination,
    /// Pairwise tournament with a global release flag.
    Tournament,
    /// k-ary gather/release tree.
    Tree,
}

impl Algorithm {
    /// Every concrete algorithm.
    pub const ALL: [Algorithm; 4] = [Algorithm::Central, Algorithm::Dissemination, Algorithm::Tournament, Algorithm::Tree];

    /// The parameter spelling.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Central => "central",
            Algorithm::Dissemination => "dissemination",
            Algorithm::Tournament => "tournament",
            Algorithm::Tree => "tree",
        }
    }

    /// Parses the parameter spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [Algorithm::Auto, Algorithm::Central, Algorithm::Dissemination, Algorithm::Tournament, Algorithm::Tree]
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(text.trim()))
    }

    fn code(self) -> u64 {
        self as u64
    }

    fn from_code(code: u64) -> Self {
        match code {
            1 => Algorithm::Central,
            2 => Algorithm::Dissemination,
            3 => Algorithm::Tournament,
            4 => Algorithm::Tree,
            _ => Algorithm::Auto,
        }
    }

    /// The `auto` choice for `n` ranks, from measurements on a 2-core x86_64 VM (see
    /// `docs/benchmark.md`): the central counter is fastest at 2 ranks and whenever ranks park
    /// (one wake releases everyone); dissemination wins when each rank has a core and there are
    /// enough ranks that one shared counter line becomes the bottleneck.
    pub fn resolve(self, n: usize, parks: bool) -> Algorithm {
        match self {
            Algorithm::Auto if parks || n <= 4 => Algorithm::Central,
            Algorithm::Auto => Algorithm::Dissemination,
            a => a,
        }
    }
}

/// The software backend. Always accepts: it is the end of every fallback chain.
#[derive(Debug, Default)]
pub struct Software;

/// The backend's name.
pub const NAME: &str = "dissemination";

impl Backend for Software {
    fn name(&self) -> &'static str {
        NAME
    }

    fn default_priority(&self) -> i32 {
        10
    }

    fn description(&self) -> &'static str {
        "software barrier over shared memory (central, dissemination, tournament, tree); works everywhere"
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo::new(
                "BARRIER_SW_ALGORITHM",
                "auto",
                "auto, central, dissemination, tournament or tree (auto: central at <= 4 ranks or when ranks park, else dissemination).",
            ),
            ParamInfo::new("BARRIER_TREE_ARITY", "4", "Children per node of the tree algorithm (2..=64)."),
        ]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        let algo = ctx.params.get("BARRIER_SW_ALGORITHM").unwrap_or_else(|| "auto".into());
        if Algorithm::parse(&algo).is_none() {
            return Err(Decline::new(format!(
                "BARRIER_SW_ALGORITHM={algo} is not one of auto, central, dissemination, tournament, tree"
            )));
        }
        match ctx.params.parse::<usize>("BARRIER_TREE_ARITY", 4, "an integer from 2 to 64") {
            Ok(k) if (2..=64).contains(&k) => Ok(()),
            Ok(k) => Err(Decline::new(format!("BARRIER_TREE_ARITY={k} is outside 2..=64"))),
            Err(e) => Err(Decline::new(e.to_string())),
        }
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        let params = ctx.query.params;
        let local_algo = params.get("BARRIER_SW_ALGORITHM").and_then(|a| Algorithm::parse(&a)).unwrap_or(Algorithm::Auto);
        let local_arity = params.parse::<u64>("BARRIER_TREE_ARITY", 4, "").unwrap_or(4);
        // Rank 0's choice wins, so that every rank runs the same algorithm.
        let agreed = ctx.broadcast(0, local_algo.code() | (local_arity << 8)).map_err(|e| Decline::new(e.to_string()))?;
        let n = ctx.query.size;
        let algo = Algorithm::from_code(agreed & 0xff).resolve(n, ctx.policy.wakes());
        let arity = ((agreed >> 8) as usize).clamp(2, 64);
        Ok(Box::new(SoftwareModule::new(ctx.region.clone(), ctx.query.rank, algo, arity, ctx.policy.wakes())))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Dissemination/tournament: working through rounds; tree: gathering children.
    Rounds,
    /// Waiting for a release flag.
    Release,
    /// Complete for this epoch.
    Done,
}

/// One rank's software barrier state on one communicator.
#[derive(Debug)]
pub struct SoftwareModule {
    region: Region,
    rank: usize,
    n: usize,
    algo: Algorithm,
    arity: usize,
    wake: bool,
    phase: Phase,
    /// Next round (dissemination, tournament) or next child (tree) to check.
    step: usize,
}

impl SoftwareModule {
    pub(crate) fn new(region: Region, rank: usize, algo: Algorithm, arity: usize, wake: bool) -> Self {
        let n = region.size();
        SoftwareModule { region, rank, n, algo, arity, wake, phase: Phase::Done, step: 0 }
    }

    fn children(&self) -> std::ops::Range<usize> {
        let first = self.rank * self.arity + 1;
        first.min(self.n)..(first + self.arity).min(self.n)
    }

    fn release_children(&self, epoch: u64) {
        let down = self.region.tree_down();
        for c in self.children() {
            down[c].signal(epoch, self.wake);
        }
    }

    fn dissemination_send(&self, round: usize, epoch: u64) {
        let partner = (self.rank + (1 << round)) % self.n;
        self.region.diss(partner, round).signal(epoch, self.wake);
    }
}

impl Module for SoftwareModule {
    fn algorithm(&self) -> &str {
        self.algo.name()
    }

    fn arrive(&mut self, epoch: u64) -> Result<(), Error> {
        self.phase = Phase::Rounds;
        self.step = 0;
        match self.algo {
            Algorithm::Central => {
                let total = self.region.central_count().fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
                if total == self.n as u64 * epoch {
                    self.region.central_release().signal(epoch, self.wake);
                }
                self.phase = Phase::Release;
            }
            Algorithm::Dissemination if self.region.rounds() > 0 => self.dissemination_send(0, epoch),
            _ => {}
        }
        // Tournament losers and tree leaves signal without waiting: let progress do it now.
        if matches!(self.algo, Algorithm::Tournament | Algorithm::Tree) {
            self.progress(epoch)?;
        }
        Ok(())
    }

    fn progress(&mut self, epoch: u64) -> Result<Poll<'_>, Error> {
        loop {
            match (self.algo, self.phase) {
                (_, Phase::Done) => return Ok(Poll::Ready),
                (Algorithm::Central | Algorithm::Auto, _) => {
                    let flag = self.region.central_release();
                    return Ok(if flag.reached(epoch) { Poll::Ready } else { Poll::Pending { flag, target: epoch } });
                }
                (Algorithm::Dissemination, _) => {
                    let rounds = self.region.rounds();
                    while self.step < rounds {
                        let flag = self.region.diss(self.rank, self.step);
                        if !flag.reached(epoch) {
                            return Ok(Poll::Pending { flag: self.region.diss(self.rank, self.step), target: epoch });
                        }
                        self.step += 1;
                        if self.step < rounds {
                            self.dissemination_send(self.step, epoch);
                        }
                    }
                    self.phase = Phase::Done;
                }
                (Algorithm::Tournament, Phase::Rounds) => {
                    if self.step == self.region.rounds() {
                        // Only rank 0 wins every round.
                        self.region.tourn_release().signal(epoch, self.wake);
                        self.phase = Phase::Done;
                        continue;
                    }
                    let span = 1usize << self.step;
                    if self.rank & (2 * span - 1) == 0 {
                        let opponent = self.rank + span;
                        if opponent < self.n && !self.region.tourn(self.rank, self.step).reached(epoch) {
                            return Ok(Poll::Pending { flag: self.region.tourn(self.rank, self.step), target: epoch });
                        }
                        self.step += 1;
                    } else {
                        self.region.tourn(self.rank - span, self.step).signal(epoch, self.wake);
                        self.phase = Phase::Release;
                    }
                }
                (Algorithm::Tournament, Phase::Release) => {
                    let flag = self.region.tourn_release();
                    if !flag.reached(epoch) {
                        return Ok(Poll::Pending { flag, target: epoch });
                    }
                    self.phase = Phase::Done;
                }
                (Algorithm::Tree, Phase::Rounds) => {
                    let children = self.children();
                    let first = children.start;
                    let up = self.region.tree_up();
                    while first + self.step < children.end {
                        if !up[first + self.step].reached(epoch) {
                            return Ok(Poll::Pending { flag: &self.region.tree_up()[first + self.step], target: epoch });
                        }
                        self.step += 1;
                    }
                    if self.rank == 0 {
                        self.release_children(epoch);
                        self.phase = Phase::Done;
                    } else {
                        self.region.tree_up()[self.rank].signal(epoch, self.wake);
                        self.phase = Phase::Release;
                    }
                }
                (Algorithm::Tree, Phase::Release) => {
                    let flag = &self.region.tree_down()[self.rank];
                    if !flag.reached(epoch) {
                        return Ok(Poll::Pending { flag: &self.region.tree_down()[self.rank], target: epoch });
                    }
                    self.release_children(epoch);
                    self.phase = Phase::Done;
                }
            }
        }
    }
}
