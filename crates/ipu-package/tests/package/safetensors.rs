//! Tests of safetensors (filled in by the following commits).
