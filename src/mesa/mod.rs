//! A simulated Mesa HostMot2 card on the network, for rehearsing a LinuxCNC configuration that uses
//! `hm2_eth` before the card arrives, and for testing against LinuxCNC's own driver.
//!
//! Three parts, bottom up:
//!
//! * [`lbp16`]: the request/response codec of Mesa's Ethernet cards (commands, addresses, data).
//! * [`idrom`]: what the firmware says about itself — the cookie, the IDROM header, module and pin
//!   descriptors — and the two board layouts offered ([`BoardKind`]: a 7I96S-like and a
//!   7I76E-like card, each with a watchdog, 3 IOPorts of 17 pins, 5 step generators, 1 encoder).
//! * [`board`]: the card itself — its memory spaces (0 HostMot2 registers, 2 Ethernet EEPROM,
//!   3 flash registers, 4 timers, 6 comm/status, 7 board info, each with its info area), its
//!   register image and the modules' behaviour on the board's own clock (step generators advance
//!   at the commanded rate, the watchdog bites when not petted), the field side for embedding code
//!   (inputs, encoder counts, what the outputs drive) and a bounded log of the host's writes.
//! * [`server`]: the board on UDP (port 27181), as `rtapi mesa-sim` serves it.
//!
//! Written from the protocol as LinuxCNC 2.9's `hm2_eth` and `hostmot2` drive it; no Mesa firmware
//! or LinuxCNC code is in here. Uses only the standard library, `libc` and `nix`.

pub mod board;
pub mod idrom;
pub mod lbp16;
pub mod server;

pub use board::{Board, BoardNs, Event, HostWrites, Switch, WriteLog, Written};
pub use idrom::BoardKind;
pub use server::{Options, ServeError, Sim};
