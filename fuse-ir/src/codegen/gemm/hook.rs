//! The epilogue hook every GEMM template is spliced after, and horizontal fusion in the templates.
//!
//! A MultiGemm group's kernel (`FUSE_GEMM_PRODUCTS` products of one left operand: separate q, k and v
//! weights) is the template's kernel of one product at a time: the runtime lays the products' grids one
//! after another, and each block first finds its product in the table that follows `FuseGemmArgs`
//! (`fuse_gemm_select`), takes that product's weight, width and row stride as the template's `w0`, `n` and
//! `ldw0`, and its block index within that product's grid; the epilogue then runs that product's nodes
//! only (`FuseArgs::product`). So every template computes a horizontal group with no change to its main
//! loop, and the epilogue of one product never reads another's operands.

use crate::codegen::emit::{self, KernelParts};
use crate::codegen::pointwise;
use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::plan::{Group, Product};
use std::fmt::Write;

/// The operands every GEMM template reads after `FuseArgs`, as fuse-runtime packs them (`SkinnyGemm::words`),
/// with a horizontal group's product table, and the macros the templates take their parameters and block
/// index through. (The helpers the templates share, from shared-memory addresses to mma.sync, are the CUDA
/// prelude's.)
const GEMM_COMMON: &str = "\
struct FuseGemmArgs {
  const void* x;
  const void* w0;
  const void* w1;
  long long m, n, k, lda, ldw0, ldw1;
  float* ws;
  unsigned* counters;
#if defined(FUSE_GEMM_PRODUCTS)
  // Product j: weight wp[j] of np[j] rows, ldwp[j] apart; its blocks are first_block[j] .. first_block[j + 1].
  const void* wp[FUSE_GEMM_PRODUCTS];
  long long np[FUSE_GEMM_PRODUCTS], ldwp[FUSE_GEMM_PRODUCTS], first_block[FUSE_GEMM_PRODUCTS + 1];
  // This block's index within its product's blocks, and their count (fuse_gemm_select sets both).
  long long block, blocks;
#endif
};
#if defined(FUSE_GEMM_PRODUCTS)
// The product of block b: its weight, width and stride become w0, n and ldw0; the epilogue runs its nodes.
__device__ __forceinline__ void fuse_gemm_select(FuseArgs& epi, FuseGemmArgs& gemm, long long b) {
  long long first = 0, next = gemm.first_block[1];
  epi.product = 0;
  gemm.w0 = gemm.wp[0];
  gemm.n = gemm.np[0];
  gemm.ldw0 = gemm.ldwp[0];
#pragma unroll
  for (int j = 1; j < FUSE_GEMM_PRODUCTS; ++j) {
    if (b >= gemm.first_block[j]) {
      epi.product = j;
      gemm.w0 = gemm.wp[j];
      gemm.n = gemm.np[j];
      gemm.ldw0 = gemm.ldwp[j];
      first = gemm.first_block[j];
      next = gemm.first_block[j + 1];
    }
  }
  gemm.block = b - first;
  gemm.blocks = next - first;
}
#define FUSE_GEMM_PARAMS(T, p, given) T p = given; fuse_gemm_select(p.epi, p.gemm, blockIdx.x)
#define FUSE_GEMM_BLOCK(gemm) ((unsigned)(gemm).block)
#define FUSE_GEMM_BLOCKS(gemm) ((unsigned)(gemm).blocks)
// A one-launch step's view of a task ahead (block `block` of its launch's `blocks`): its product's arguments,
// and `block`, `blocks` within that product's.
#define FUSE_GEMM_TASK_PARAMS(T, p, given, block, blocks) \
  T p = given;                                              \
  fuse_gemm_select(p.epi, p.gemm, block);                   \
  block = (unsigned)p.gemm.block, blocks = (unsigned)p.gemm.blocks
#else
#define FUSE_GEMM_PARAMS(T, p, given) const T& p = given
#define FUSE_GEMM_BLOCK(gemm) blockIdx.x
#define FUSE_GEMM_BLOCKS(gemm) gridDim.x
#define FUSE_GEMM_TASK_PARAMS(T, p, given, block, blocks) const T& p = given
#endif
";

/// What every GEMM template is spliced after: the prelude, the epilogue's body, the hook in two parts:
/// `fuse_gemm_row(args, row)` (the slots' offsets for one product row, computed once per row) and
/// `fuse_gemm_store(args, r, col, acc0, acc1)` (one element: accumulator j feeds the slot of matmul j),
/// with `fuse_gemm_epilogue(args, row, col, acc0, acc1)` doing both, then [`GEMM_COMMON`]. With
/// `products` (a MultiGemm group), the store runs the epilogue of the block's product only.
pub(in crate::codegen) fn epilogue_hook(
    parts: &KernelParts<'_>,
    matmuls: &[NodeId],
    products: &[Product],
    kind: &str,
) -> String {
    let mut s = String::new();
    if !products.is_empty() {
        // Before the prelude: `FuseArgs` then holds the product index.
        let _ = writeln!(s, "#define FUSE_GEMM_PRODUCTS {}", products.len());
    }
    s.push_str(&parts.preamble(kind));
    if products.is_empty() {
        s.push_str(&pointwise::body_function(parts));
    }
    s.push_str("struct FuseGemmRow { long long bi[FUSE_NIN], si[FUSE_NIN], bo[FUSE_NOUT], so[FUSE_NOUT]; };\n");
    s.push_str("__device__ __forceinline__ FuseGemmRow fuse_gemm_row(const FuseArgs& args, long long row) {\n");
    s.push_str("  FuseGemmRow r;\n  fuse_row_offsets(args, row, r.bi, r.si, r.bo, r.so);\n  return r;\n}\n");
    s.push_str(
        "__device__ __forceinline__ void fuse_gemm_store(const FuseArgs& args, const FuseGemmRow& r, long long col,\n\
         \x20                                               float acc0, float acc1) {\n",
    );
    if products.is_empty() {
        s.push_str("  float x[FUSE_NIN];\n  float y[FUSE_NOUT];\n");
        for (k, id) in parts.inputs.iter().enumerate() {
            let line = match matmuls.iter().position(|m| m == id) {
                Some(j) => format!("  x[{k}] = acc{j};"),
                None => format!("  x[{k}] = {};", emit::read(k, &format!("r.bi[{k}] + col * r.si[{k}]"))),
            };
            let _ = writeln!(s, "{line}");
        }
        s.push_str("  fuse_body(x, y);\n");
        for k in 0..parts.outputs.len() {
            let _ = writeln!(s, "  {}", emit::write(k, &format!("r.bo[{k}] + col * r.so[{k}]"), &format!("y[{k}]")));
        }
    } else {
        product_stores(&mut s, parts, products);
    }
    s.push_str("}\n");
    s.push_str(
        "__device__ __forceinline__ void fuse_gemm_epilogue(const FuseArgs& args, long long row, long long col,\n\
         \x20                                                  float acc0, float acc1) {\n\
         \x20 fuse_gemm_store(args, fuse_gemm_row(args, row), col, acc0, acc1);\n}\n\n",
    );
    s.push_str(GEMM_COMMON);
    s
}

/// The store of a horizontal group: one case per product, reading that product's slots, computing its
/// epilogue nodes and writing its outputs (the slots are the kernel's, shared by all products).
fn product_stores(s: &mut String, parts: &KernelParts<'_>, products: &[Product]) {
    let g = parts.g;
    let slot = |ids: &[NodeId], id: NodeId| ids.iter().position(|&i| i == id);
    s.push_str("  (void)acc1;\n  switch (args.product) {\n");
    for (j, p) in products.iter().enumerate() {
        let _ = writeln!(s, "  case {j}: {{");
        let _ = writeln!(s, "    const float v{} = acc0;", p.matmul.0);
        let mut read: Vec<NodeId> = Vec::new();
        for &n in &p.epilogue {
            for &a in &g.node(n).args {
                let inside = a == p.matmul || p.epilogue.contains(&a) || matches!(g.op(a), Op::Const(_));
                if !inside && !read.contains(&a) {
                    read.push(a);
                }
            }
        }
        for a in read {
            let Some(k) = slot(parts.inputs, a) else { continue };
            let _ =
                writeln!(s, "    const float v{} = {};", a.0, emit::read(k, &format!("r.bi[{k}] + col * r.si[{k}]")));
        }
        for &n in &p.epilogue {
            let _ = writeln!(s, "    {}", emit::compute(g, n));
        }
        for &o in &p.outputs {
            let Some(k) = slot(parts.outputs, o) else { continue };
            let at = format!("r.bo[{k}] + col * r.so[{k}]");
            let _ = writeln!(s, "    {}", emit::write(k, &at, &emit::value(g, o)));
        }
        s.push_str("  } break;\n");
    }
    s.push_str("  default: break;\n  }\n");
}

/// The epilogue a skinny kernel runs: input slots (`products[j]` is the slot of matmul j's product) and
/// the nodes and outputs. `None` when the group cannot take one: a product that is itself written to
/// memory, or reductions after the matmuls.
pub(in crate::codegen) struct SkinnyEpilogue {
    pub inputs: Vec<NodeId>,
    pub outputs: Vec<NodeId>,
    pub nodes: Vec<NodeId>,
}

/// The epilogue slots of a MultiGemm group's template kernel: every product's epilogue nodes, the values
/// they read, and the group's outputs among them; a product that is itself an output with no epilogue
/// (`q = x.matmul(wq.t())` returned as it is) reads and writes its own slot. `None` when a template cannot
/// run the group: an epilogue node that is not pointwise, or a product both written and read further.
pub(in crate::codegen) fn multi_epilogue(g: &Graph, grp: &Group) -> Option<(SkinnyEpilogue, Vec<Product>)> {
    let products = grp.products(g);
    let nodes: Vec<NodeId> = grp.epilogue().collect();
    if nodes.iter().any(|&n| !g.op(n).is_pointwise() && !matches!(g.op(n), Op::Const(_))) {
        return None;
    }
    let mut inputs = crate::codegen::reads(g, &nodes);
    let mut outputs = Vec::new();
    for p in &products {
        let written = grp.outputs.contains(&p.matmul);
        match (p.epilogue.is_empty(), written) {
            (true, true) => {
                inputs.push(p.matmul);
                outputs.push(p.matmul);
            }
            (false, false) if inputs.contains(&p.matmul) => {
                outputs.extend(p.outputs.iter().copied());
            }
            _ => return None,
        }
    }
    Some((SkinnyEpilogue { inputs, outputs, nodes }, products))
}
