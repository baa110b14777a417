//! Pointwise kernels: a grid-stride loop over the domain. The work per element is one inlined function from
//! the input values to the output values, so the dense vector path and the strided path share it.
//!
//! - `FUSE_CONTIGUOUS=1`: every tensor is dense over the domain, so element `i` is at offset `i` in every
//!   slot; each thread takes 8 consecutive elements per step with 16-byte loads and stores, and the tail
//!   (fewer than 8 elements) one by one.
//! - otherwise: each element's offsets come from its coordinates and the slots' strides (0 on broadcast axes).

use super::emit::{self, KernelParts};
use super::prelude::VECTOR_ELEMENTS;
use crate::op::Op;
use std::fmt::Write;

pub(super) fn source(parts: &KernelParts<'_>) -> String {
    let mut s = parts.preamble("pointwise");
    s.push_str(&body_function(parts));
    s.push_str(&parts.signature());
    let (nin, nout) = (parts.inputs.len(), parts.outputs.len());
    let vec = VECTOR_ELEMENTS;
    s.push_str("  const long long numel = args.numel;\n");
    s.push_str("  const long long stride = (long long)gridDim.x * blockDim.x;\n");
    s.push_str("  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
    s.push_str("#if FUSE_CONTIGUOUS\n");
    let _ = writeln!(s, "  const long long vectors = numel / {vec};");
    s.push_str("  for (long long v = first; v < vectors; v += stride) {\n");
    let _ = writeln!(s, "    float xs[FUSE_NIN][{vec}];\n    float ys[FUSE_NOUT][{vec}];");
    for k in 0..nin {
        let _ = writeln!(s, "    fuse_read8<FUSE_IN{k}>(args.in[{k}], v * {vec}, xs[{k}]);");
    }
    s.push_str("#pragma unroll\n");
    let _ = writeln!(s, "    for (int e = 0; e < {vec}; ++e) {{");
    s.push_str("      float x[FUSE_NIN];\n      float y[FUSE_NOUT];\n");
    s.push_str("#pragma unroll\n      for (int k = 0; k < FUSE_NIN; ++k) x[k] = xs[k][e];\n");
    s.push_str("      fuse_body(x, y);\n");
    s.push_str("#pragma unroll\n      for (int k = 0; k < FUSE_NOUT; ++k) ys[k][e] = y[k];\n");
    s.push_str("    }\n");
    for k in 0..nout {
        let _ = writeln!(s, "    fuse_write8<FUSE_OUT{k}>(args.out[{k}], v * {vec}, ys[{k}]);");
    }
    s.push_str("  }\n");
    let _ = writeln!(s, "  for (long long i = vectors * {vec} + first; i < numel; i += stride) {{");
    s.push_str(&element(nin, nout, |_| "i".to_string(), |_| "i".to_string()));
    s.push_str("  }\n");
    s.push_str("#else\n");
    s.push_str("  for (long long i = first; i < numel; i += stride) {\n");
    s.push_str("    long long oi[FUSE_NIN];\n    long long oo[FUSE_NOUT];\n");
    s.push_str("    fuse_offsets(args, i, oi, oo);\n");
    s.push_str(&element(nin, nout, |k| format!("oi[{k}]"), |k| format!("oo[{k}]")));
    s.push_str("  }\n");
    s.push_str("#endif\n}\n");
    s
}

/// One element, offsets given per slot: read every input, compute, write every output.
fn element(
    nin: usize,
    nout: usize,
    in_offset: impl Fn(usize) -> String,
    out_offset: impl Fn(usize) -> String,
) -> String {
    let mut s = String::from("    float x[FUSE_NIN];\n    float y[FUSE_NOUT];\n");
    for k in 0..nin {
        let _ = writeln!(s, "    x[{k}] = {};", emit::read(k, &in_offset(k)));
    }
    s.push_str("    fuse_body(x, y);\n");
    for k in 0..nout {
        let _ = writeln!(s, "    {}", emit::write(k, &out_offset(k), &format!("y[{k}]")));
    }
    s
}

/// `fuse_body(x, y)`: the group's nodes in topological order over the input values `x`, into `y`.
pub(super) fn body_function(parts: &KernelParts<'_>) -> String {
    let g = parts.g;
    let mut s = String::from(
        "__device__ __forceinline__ void fuse_body(const float (&x)[FUSE_NIN], float (&y)[FUSE_NOUT]) {\n",
    );
    for (k, &id) in parts.inputs.iter().enumerate() {
        let _ = writeln!(s, "  const float v{} = x[{k}];", id.0);
    }
    for &id in parts.nodes {
        // `contiguous` and `broadcast_as` are copies: the operand read through its strides (broadcast to the
        // result's shape), written dense (emit::compute).
        if g.op(id).is_pointwise()
            || matches!(g.op(id), Op::View(crate::view::ViewOp::Contiguous | crate::view::ViewOp::BroadcastAs { .. }))
        {
            let _ = writeln!(s, "  {}", emit::compute(g, id));
        } else if !matches!(g.op(id), Op::Const(_)) {
            // A verified plan puts only pointwise nodes in a pointwise kernel.
            let _ = writeln!(s, "  #error \"fuse: {} cannot run in a pointwise kernel\"", g.op(id).name());
        }
    }
    for (k, &id) in parts.outputs.iter().enumerate() {
        let _ = writeln!(s, "  y[{k}] = {};", emit::value(g, id));
    }
    s.push_str("}\n\n");
    s
}
