//! Integration tests of ipu-exchange: instruction round trips, scheduling
//! properties checked by the independent checker, hand-made bad rows the
//! checker must reject, snapshots, validation and the replay against memory.

mod bad;
mod common;
mod generated;
mod isa;
mod logging;
mod paired;
mod props;
mod snapshot;
mod validation;
