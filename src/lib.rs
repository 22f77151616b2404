//! rtapi
pub mod detect;
