//! `scope_sampler`: the real-time end of `rtapi scope` — LinuxCNC's `sampler` (same pins, same
//! FIFO, same per-call work), but with instances named by `names=` instead of numbered per `cfg=`
//! string, so that a scope attaching to a running instance never collides with the machine's own
//! `sampler.N`. `loadrt scope_sampler names=scope-1234 cfg=ffu depth=4096`.

use super::capture::Sampler;
use super::{Component, LoadContext, LoadError};

/// See the module docs.
pub(crate) struct ScopeSampler;

impl Component for ScopeSampler {
    const NAME: &'static str = "scope_sampler";
    const SUMMARY: &'static str = "a named sampler for `rtapi scope`";
    const ARGS: &'static [&'static str] = &["cfg", "depth"];

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        <Sampler as Component>::load(ctx)
    }
}
