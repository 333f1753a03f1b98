//! The readable listing of an AMP program (its `Display`): the header,
//! then each group's passes, each with the supervisor's coefficient load
//! and every worker's ops.

use ipu_layout::{AmpOperand, ElementOrder};

use super::{AmpOp, AmpProgram, Run};

fn write_runs(f: &mut std::fmt::Formatter<'_>, operand: &str, runs: &[Run]) -> std::fmt::Result {
    for r in runs {
        write!(
            f,
            " {operand}+{}[{}B x{} /{}]",
            r.offset, r.bytes, r.count, r.stride
        )?;
    }
    Ok(())
}

impl std::fmt::Display for AmpProgram {
    /// A readable listing: the header, then each group's passes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.header;
        // The left order is named only when it is not the AMP's own.
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
        let mut index = 0usize;
        for (g, group) in self.groups.iter().enumerate() {
            writeln!(f, "group {g}:")?;
            for pass in &group.passes {
                let c = &pass.coefficients;
                write!(
                    f,
                    "  pass {index}: load_coefficients inner={} columns={}",
                    c.inner, c.columns
                )?;
                write_runs(f, "right", &c.runs)?;
                writeln!(f)?;
                for w in &pass.workers {
                    write!(f, "    {}:", w.worker)?;
                    for op in &w.ops {
                        let (a, b) = op.dims();
                        let (name, bn, operand) = match op {
                            AmpOp::ZeroPartials { .. } => ("zero_partials", "columns", "output"),
                            AmpOp::LoadPartials { .. } => ("load_partials", "columns", "output"),
                            AmpOp::StreamRows { .. } => ("stream_rows", "inner", "left"),
                            AmpOp::StorePartials { .. } => ("store_partials", "columns", "output"),
                        };
                        write!(f, " {name} rows={a} {bn}={b}")?;
                        write_runs(f, operand, op.runs())?;
                        write!(f, ";")?;
                    }
                    writeln!(f)?;
                }
                index += 1;
            }
        }
        Ok(())
    }
}
