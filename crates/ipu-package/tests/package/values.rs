//! Tests of values (filled in by the following commits).
