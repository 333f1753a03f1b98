//! Integration tests of ipu-package.

mod plan;
