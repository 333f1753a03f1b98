//! Integration tests of ipu-kernels: planning, programs and their checker,
//! the emulator against the reference, both left orders, the cost model
//! and its grounding in Graphcore's published figures, ELF objects and the
//! kernel cache.

mod cache;
mod elf;
mod emulate;
mod grounding;
mod left_order;
mod model;
mod planner;
mod program;
mod support;
