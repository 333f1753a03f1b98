//! The `--device FILE` option the tasks share: a device description read
//! from a file, or the built-in IPU21 one.

use std::path::Path;

use ipu_target::{Target, TargetError};

/// The device described by `path`, or the built-in IPU21 without one.
pub(crate) fn read(path: Option<&Path>) -> Result<Target, TargetError> {
    match path {
        Some(p) => Target::from_file(p),
        None => Ok(Target::ipu21().clone()),
    }
}
