//! Examples that embed the IPU21 backend crates as another toolchain
//! would, and run what they build on the tile model.
//!
//! They live in a crate of their own, above both the package builder
//! (`ipu-package`) and the oracle that runs packages (`ipu-sim`), so that
//! no library crate depends on the oracle, not even for an example. The
//! library target is empty; the examples are under `examples/`:
//!
//! - `embed` — the tiny SigLIP fixture built on 16 tiles with a placer, an
//!   exchange scheduler, a kernel toolchain and a kernel store written in
//!   the example itself, run on the tile model against the reference
//!   evaluation, and the build refusing a wrong result from each of the
//!   four stages with its own typed error. Run it with
//!   `cargo run -p ipu-examples --example embed`.

#![forbid(unsafe_code)]
