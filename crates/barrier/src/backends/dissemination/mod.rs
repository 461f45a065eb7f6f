//! The software backend (`dissemination`): barriers over shared memory that work everywhere.
//! The algorithms themselves (central, dissemination, tournament, tree, gather) are the flag barriers
//! of [`crate::algo::flag`], beneath the backends; this backend offers them, with their
//! parameters, to the selector.

/// The algorithms this backend offers (`BARRIER_SW_ALGORITHM`).
pub use crate::algo::flag::Algorithm;
use crate::algo::flag::{self, tail_spin, SoftwareModule, DEFAULT_GATHER_RADIX, GATHER_FROM};
use crate::algo::tail;
use crate::backend::{Backend, Decline, EnableContext, Module, QueryContext};
use crate::params::{ParamInfo, ParamKind};

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
        "software barrier over shared memory (central, dissemination, tournament, tree, gather); works everywhere"
    }

    fn params(&self) -> Vec<ParamInfo> {
        vec![
            ParamInfo::new(
                "BARRIER_SW_ALGORITHM",
                "auto",
                format!(
                    "auto, central, dissemination, tournament, tree or gather (auto: central when ranks park; when they \
                     spin, dissemination below {GATHER_FROM} ranks, gather from there on; barrier info says which and why)."
                ),
            )
            .kind(ParamKind::Choice(&["auto", "central", "dissemination", "tournament", "tree", "gather"])),
            ParamInfo::new("BARRIER_TREE_ARITY", "4", "Children per node of the tree algorithm (2..=64).")
                .kind(ParamKind::Int { min: 2, max: 64 }),
            ParamInfo::new(
                "BARRIER_GATHER_RADIX",
                DEFAULT_GATHER_RADIX.to_string(),
                "Children per rank of the gather algorithm's tree (1..=64; a communicator of up to this many ranks and \
                 one gathers flat: rank 0 reads every rank's slot).",
            )
            .kind(ParamKind::Int { min: 1, max: 64 }),
            ParamInfo::new(
                "BARRIER_SW_TAIL_SPIN",
                "50us",
                "Central algorithm and one-group hardware offload, more ranks than cores: how long a rank whose CPU holds no missing rank spins for the release before it yields (at most 1ms, plus the 64 checks before the spin first reads the clock; 0 disables).",
            )
            .kind(ParamKind::DurationAtMost(tail::MAX_TAIL_SPIN)),
        ]
    }

    fn query(&self, ctx: &QueryContext<'_>) -> Result<(), Decline> {
        let algo = ctx.params.get("BARRIER_SW_ALGORITHM").unwrap_or_else(|| "auto".into());
        if Algorithm::parse(&algo).is_none() {
            return Err(Decline::new(format!(
                "BARRIER_SW_ALGORITHM={algo} is not one of auto, central, dissemination, tournament, tree, gather"
            )));
        }
        match ctx.params.parse::<usize>("BARRIER_TREE_ARITY", 4, "an integer from 2 to 64") {
            Ok(k) if (2..=64).contains(&k) => {}
            Ok(k) => return Err(Decline::new(format!("BARRIER_TREE_ARITY={k} is outside 2..=64"))),
            Err(e) => return Err(Decline::new(e.to_string())),
        }
        match ctx.params.parse::<usize>("BARRIER_GATHER_RADIX", DEFAULT_GATHER_RADIX, "an integer from 1 to 64") {
            Ok(k) if (1..=64).contains(&k) => {}
            Ok(k) => return Err(Decline::new(format!("BARRIER_GATHER_RADIX={k} is outside 1..=64"))),
            Err(e) => return Err(Decline::new(e.to_string())),
        }
        tail_spin(ctx.params).map(|_| ()).map_err(|e| Decline::new(e.to_string()))
    }

    fn enable(&self, ctx: &EnableContext<'_>) -> Result<Box<dyn Module>, Decline> {
        Ok(Box::new(self.enable_software(ctx)?))
    }
}
impl Software {
    /// [`Backend::enable`] returning the concrete module, which the communicator dispatches
    /// statically.
    pub fn enable_software(&self, ctx: &EnableContext<'_>) -> Result<SoftwareModule, Decline> {
        flag::enable(ctx)
    }
}
