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

/// The host scalars of `g` that no group computes, in node order.
pub(crate) fn program(g: &Graph) -> Vec<HostScalar> {
    let (host, free) = (fuse_ir::plan::host_scalars(g), fuse_ir::plan::free_nodes(g));
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
        let value = |i: usize| match h.operands.get(i) {
            Some(Operand::Entry(e)) => f64::from_bits(addresses[*e]),
            Some(Operand::Literal(v)) => *v,
            None => f64::NAN,
        };
        let v = match h.op {
            Op::Unary(u) => u.eval(value(0)),
            Op::Binary(b) => b.eval(value(0), value(1)),
            Op::Where => Op::select(value(0), value(1), value(2)),
            _ => f64::NAN,
        };
        addresses[h.node] = v.to_bits();
    }
}
