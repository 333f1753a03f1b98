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
//!
//! The entry point is [`build_package`]: a graph, a [`BuildConfig`] (the
//! device as an `ipu_target::Target`, the tile count, planner options) and
//! the [`Stages`] to run, each behind a small trait so that an embedding
//! toolchain brings its own placer (`ipu_alloc::Placer`), exchange
//! scheduler (`ipu_exchange::ExchangeScheduler`), kernel toolchain
//! (`ipu_kernels::Toolchain`) or kernel store (`ipu_kernels::KernelStore`).
//! Every stage returns plain data, and the build checks all of it with
//! checkers that share nothing with any stage. For example, the tiny
//! fixture on a 64-tile device with kernels kept in a store of the
//! embedder's own (bytes by key: the build compiles a miss and checks what
//! the store returns):
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Mutex, PoisonError};
//!
//! use ipu_kernels::{KernelError, KernelKey, KernelStore};
//! use ipu_package::{BuildConfig, Stages, build_package, graph::parse_fixture};
//! use ipu_target::Target;
//!
//! /// Compiled kernels in memory.
//! #[derive(Default)]
//! struct Kernels(Mutex<HashMap<KernelKey, Vec<u8>>>);
//!
//! impl KernelStore for Kernels {
//!     fn name(&self) -> &str {
//!         "my-kernels"
//!     }
//!     fn get(&self, key: &KernelKey) -> Result<Option<Vec<u8>>, KernelError> {
//!         Ok(self.0.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned())
//!     }
//!     fn put(&self, key: &KernelKey, value: &[u8]) -> Result<(), KernelError> {
//!         let mut kernels = self.0.lock().unwrap_or_else(PoisonError::into_inner);
//!         kernels.insert(key.clone(), value.to_vec());
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
//! # std::env::set_current_dir(&root)?;
//! // The device: the built-in IPU21 (`Target::ipu21()`) or any description.
//! let target = Target::from_file("device/ipu21-m64.toml".as_ref())?;
//! let graph = parse_fixture(&std::fs::read_to_string("fixtures/tiny-2l-h64.json")?)?;
//! // Any stage may be the embedder's own: here, the kernel store; the
//! // placer, scheduler and toolchain are this workspace's.
//! let stages = Stages::builtin(Box::new(Kernels::default()));
//! let config = BuildConfig { target, tiles: Some(16), ..BuildConfig::default() };
//! let package = build_package(&graph, &config, &stages)?;
//! # let out = tempfile::tempdir()?;
//! # let dir = out.path().join("tiny-m64");
//! package.write(&dir)?; // a package directory, as `cargo xtask build-package` writes
//! assert_eq!(package.manifest.target, "ipu21-m64");
//! # Ok(())
//! # }
//! ```
//!
//! The `ipu-examples` crate's `embed` example implements all four stages
//! and runs the package on the tile model (`ipu-sim`, which depends on
//! this crate).

#![forbid(unsafe_code)]

pub mod build;
pub mod graph;
#[cfg(feature = "testing")]
pub mod hostile;
pub mod lower;
pub mod package;
mod phases;
pub mod plan;
pub mod profile;
pub mod program;
mod storage;

pub use build::{BuildConfig, BuildError, Stages, build_package};
pub use graph::{Graph, GraphError, Op, OpId, Tensor, TensorId, TensorKind};
pub use package::{Package, PackageIoError};
pub use phases::{LocalCopy, PhaseBuildError};
pub use storage::{StorageError, StoragePlan, TileStorage, plan_storage};
