//! A running instance, from outside and from its owner: opening its segment under the trust rule
//! ([`open`]), and its control socket — the protocol, the owner's server and the client
//! ([`control`]) through which `rtapi halcmd`, `rtapi scope`, the Python module and user-space
//! components reach a live instance.
//!
//! This layer sits above `config` (the halcmd interpreter is what an instance's server runs) and
//! below `cli`, which keeps arguments, printing and exit codes; the Python module uses this layer,
//! never `cli`.

pub mod control;
pub mod open;

pub use open::{open, trust, OpenError};
