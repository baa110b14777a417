//! The host scalars a launch plan's kernels read (`fuse_ir::plan::host_scalars`: arithmetic of scalar
//! arguments and literals, such as `(d as f32).sqrt()`), recomputed on each replay from the address table,
//! where a scalar argument's entry holds its f64 bits. (Graphs with sizes, `x.dim(i)`, have views and are not
//! recorded.)

use fuse_ir::{Graph, Op};

/// One host scalar: its node, its op and its operands, in an order where each comes after its operands.
pub(crate) struct HostScalar {
    node: usize,
    op: Op,
    operands: Vec<Operand>,
}

enum Operand {
    /// An entry of the address table: a scalar argument or an earlier host scalar.
    Entry(usize),
    Literal(f64),
}

/// The host scalars of `g` (`host`, from `fuse_ir::plan::host_scalars`) that no group computes, in node order.
pub(crate) fn program(g: &Graph, host: &[bool]) -> Vec<HostScalar> {
    let free = fuse_ir::plan::free_nodes(g, host);
    g.ids()
        .filter(|&id| host[id.index()] && free[id.index()] && g.op(id).is_pointwise())
        .map(|id| HostScalar {
            node: id.index(),
            op: g.op(id),
            operands: g
                .node(id)
                .args
                .iter()
                .map(|&a| match g.op(a) {
                    Op::Const(c) => Operand::Literal(c),
                    _ => Operand::Entry(a.index()),
                })
                .collect(),
        })
        .collect()
}

/// Writes each host scalar's f64 bits into `addresses`, from the scalar arguments' entries already there.
pub(crate) fn compute(program: &[HostScalar], addresses: &mut [u64]) {
    for h in program {
        let args: Vec<f64> = h
            .operands
            .iter()
            .map(|o| match o {
                Operand::Entry(e) => f64::from_bits(addresses[*e]),
                Operand::Literal(v) => *v,
            })
            .collect();
        addresses[h.node] = h.op.eval_number(&args).unwrap_or(f64::NAN).to_bits();
    }
}
