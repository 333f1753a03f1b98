//! Integration tests of ipu-exchange: instruction round trips, scheduling
//! properties checked by the independent checker, hand-made bad rows the
//! checker must reject, snapshots and the replay against memory.

mod common;
mod generated;
