//! Tests of bad_fixtures (filled in by the following commits).
