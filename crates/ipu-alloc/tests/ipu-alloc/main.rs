//! Integration tests of ipu-alloc: the memory map, the seed regression,
//! known-bad placements the checker must reject, CSV import/export and the
//! exact search on zero-slack instances, memory profiles, and properties over
//! random problems.

mod checker;
mod classes;
mod csv;
mod fixtures;
mod map;
mod props;
mod seed;
mod solve;
mod support;
