//! Integration tests of ipu-kernels: planning, programs and their checker,
//! the emulator against the reference, the cost model, ELF objects and the
//! kernel cache.

mod cache;
mod elf;
mod emulate;
mod model;
mod planner;
mod program;
mod support;
