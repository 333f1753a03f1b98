//! The IPU21 backend's orchestrator.
//!
//! ```text
//! fixture (JSON graph) ──parse+validate──► Graph
//!    │ plan layouts (memory-aware: tilings, replication, memory classes)
//!    ▼
//! TiledProgram: steps = compute (kernel runs per tile) | exchange phase
//!    │ lifetimes of every shard on every tile
//!    ▼
//! ipu-alloc::place ──► Placement ──check_placement──►
//!    │ shard fragments between producer and consumer layouts (ipu-layout)
//!    ▼
//! ipu-exchange::schedule per phase ──► Schedule ──check──► encoded rows
//!    │ GEMM shards per tile
//!    ▼
//! ipu-kernels::plan ──► variants ──compile via Toolchain, cached──► objects
//!    ▼
//! Package (per-tile images, bindings, manifest, memory profile)
//! ```

#![forbid(unsafe_code)]

pub mod build;
pub mod checkpoint;
pub mod graph;
pub mod hostile;
pub mod lower;
pub mod package;
pub mod phases;
pub mod plan;
pub mod program;
pub mod storage;

pub use graph::{Graph, GraphError, Op, OpId, Tensor, TensorId, TensorKind};
