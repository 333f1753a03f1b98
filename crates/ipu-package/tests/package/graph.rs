//! Tests of graph (filled in by the following commits).
