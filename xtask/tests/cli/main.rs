//! End-to-end tests of the `cargo xtask` commands, run as a user runs them:
//! the built `xtask` binary in a temporary directory with its own kernel
//! cache. They hold the product's promises at the command line: a bad
//! fixture or argument gets a clear error and a non-zero status, never a
//! panic and never a partial package; builds do not depend on the thread
//! count; `inspect-package` tells a good package from a damaged one; a
//! small package runs and matches the reference; its cycle estimate prints
//! and its HTML report renders in a headless browser; hostile packages,
//! killed writes, damaged caches and failing checks end in clean errors;
//! and the command line itself answers `--help` on every task and refuses
//! what it does not know with clap's message and status 2.
//!
//! Only the small fixtures are built (well under a second each), never the
//! default SigLIP workload.

mod alloc_tile;
mod bad_inputs;
mod checkpoint;
mod class_token;
mod determinism;
mod devices;
mod hostile;
mod inspect;
mod phases;
mod report;
mod run;
mod support;
mod throughput;
mod usage;
