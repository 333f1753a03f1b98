//! The readable listing of an AMP program (its `Display`): the header,
//! then each worker's ops.

use ipu_layout::{AmpOperand, ElementOrder};

use super::{AmpOp, AmpProgram};

impl std::fmt::Display for AmpProgram {
    /// A readable listing: the header, then each worker's ops.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.header;
        // The left order is named only when it is not the AMP's own, so the
        // listings of Amp(Left) programs read as they always have.
        let left_order = match h.left_order {
            ElementOrder::Amp(AmpOperand::Left) => String::new(),
            other => format!(" ({other:?})"),
        };
        writeln!(
            f,
            "amp program v{}: {} rows x {} inner x {} columns, \
             left {}{} right {} ({}) output {} ({:?}), {}, {}, k {} c {}, left tail {} bytes, \
             align {}",
            h.format_version(),
            h.rows,
            h.inner,
            h.columns,
            h.left,
            left_order,
            h.right,
            h.right_class,
            h.output,
            h.output_order,
            h.mode.name(),
            h.arithmetic.instruction(),
            h.k,
            h.c,
            h.left_tail_bytes,
            h.alignment
        )?;
        for w in &self.workers {
            writeln!(f, "{}:", w.worker)?;
            for (i, op) in w.ops.iter().enumerate() {
                let name = match op {
                    AmpOp::LoadCoefficients { .. } => "load_coefficients",
                    AmpOp::ZeroPartials { .. } => "zero_partials",
                    AmpOp::LoadPartials { .. } => "load_partials",
                    AmpOp::StreamRows { .. } => "stream_rows",
                    AmpOp::StorePartials { .. } => "store_partials",
                };
                let (a, b) = op.dims();
                let (an, bn) = match op {
                    AmpOp::LoadCoefficients { .. } => ("inner", "columns"),
                    AmpOp::StreamRows { .. } => ("rows", "inner"),
                    _ => ("rows", "columns"),
                };
                let operand = match op {
                    AmpOp::LoadCoefficients { .. } => "right",
                    AmpOp::StreamRows { .. } => "left",
                    _ => "output",
                };
                write!(f, "  {i:3} {name} {an}={a} {bn}={b}")?;
                for r in op.runs() {
                    write!(
                        f,
                        " {operand}+{}[{}B x{} /{}]",
                        r.offset, r.bytes, r.count, r.stride
                    )?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
