//! Layout planning: how each operation is spread over tiles.
//!
//! The planner chooses, per operation, a tile-level plan (for a GEMM, a grid
//! of row, column and inner blocks; for row-wise operations, a row split)
//! and from it the [`TensorType`](ipu_layout::TensorType) of every operand.
//! Choices are ranked by estimated cycles (compute plus the exchange that
//! feeds it) subject to a per-tile byte budget; when nothing fits the budget
//! the candidate with the smallest footprint is kept, and the caller trades
//! cycles for memory by lowering budgets where placement failed.

mod attention_amp;
mod choose;
mod cost;
mod gemm;
mod layouts;

pub use attention_amp::{
    AmpAttention, AmpAttentionLayouts, AmpAttentionScorer, AttentionCycles, KEY_BLOCK,
    amp_attention_grids, amp_attention_layouts, amp_attention_supported, block_head_width,
    blocks_exponent, choose_amp_attention, key_block, padded_head_dim, pass_rows,
    probs_buffer_precision, probs_over_scores, sums_on_amp, vector_attention_cycles,
};
pub(crate) use choose::kernel_plan_config;
pub use choose::{
    GemmChoice, GemmOpCycles, GemmScorer, MAX_INNER_WINDOWS, StepCosts, choose_gemm_grid,
    choose_gemm_plan, folds_residual, inner_windows,
};
pub use cost::CostModel;
pub use gemm::{
    GemmEstimate, GemmGrid, GemmLayouts, GemmProblem, gemm_candidates, gemm_layouts, reduce_layout,
    resting_candidates,
};
pub use layouts::{
    AttentionGrid, AttentionLayouts, AttentionShape, attention_grid, attention_layouts,
    column_parts, column_tiling, element_layout, replicated, rotated, row_layout, row_major,
    row_split, rows_like, spread, tensor_type, vector_home,
};
