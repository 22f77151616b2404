//! A running instance, from outside and from its owner: the owner's session over the started
//! runtime ([`live`]: the halcmd interpreter emits each change, this layer makes it), the one start
//! sequence ([`start`](mod@start)), opening an instance's segment under the trust rule ([`open`](mod@open)), and its
//! control socket — the protocol, the owner's server and the client ([`control`]) through which
//! `rtapi halcmd`, `rtapi scope`, the Python module and user-space components reach a live
//! instance.
//!
//! This layer sits above `config` (the halcmd interpreter is what an instance's server runs; it
//! never holds a runtime) and below `cli`, which keeps arguments, printing and exit codes; the
//! Python module uses this layer, never `cli`.

pub mod control;
pub mod live;
pub mod open;
mod programs;
pub mod start;

pub use live::{LiveBackend, LiveSession};
pub use open::{open, trust, OpenError};
pub use start::{build, start};
