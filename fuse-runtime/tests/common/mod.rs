//! Shared by the integration tests: random tensors, the f64 reference interpreter, relative errors, and
//! hand-written plans (so every group kind is exercised whatever the planner decides).
#![allow(dead_code)]

use fuse_ir::interp::{eval, Array};
use fuse_ir::plan::is_free;
use fuse_ir::{DType, Graph, Group, GroupKind, NodeId, Op, Plan};
pub use fuse_runtime::testing::TestRng;
use fuse_runtime::{arg, Arg, Device, FusedFn, Fusion, Tensor};

pub fn rng(seed: u64) -> TestRng {
    TestRng::new(seed)
}

/// Values in ±[0.2, 2] (or [0.2, 2] when `positive`): non-zero, and safe for log, sqrt, recip, division.
pub fn values(rng: &mut TestRng, n: usize, positive: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let m = rng.uniform(0.2, 2.0);
            if positive || rng.next_u64() & 1 == 0 {
                m
            } else {
                -m
            }
        })
        .collect()
}

pub fn tensor(rng: &mut TestRng, shape: &[usize], dtype: DType) -> Tensor {
    tensor_in(rng, shape, dtype, false)
}

pub fn tensor_in(rng: &mut TestRng, shape: &[usize], dtype: DType, positive: bool) -> Tensor {
    let n = shape.iter().product();
    let t = Tensor::from_vec(values(rng, n, positive), shape, &Device::Cpu).expect("shape and data agree");
    t.to_dtype(dtype).expect("conversion")
}

/// The tensor's values (as stored, so already rounded to its dtype) as a reference array.
pub fn array(t: &Tensor) -> Array {
    let data = t.to_vec::<f32>().expect("readable").into_iter().map(f64::from).collect();
    Array::new(t.shape().to_vec(), data)
}

/// A function argument for tests: a tensor or a scalar.
#[derive(Clone)]
pub enum In {
    T(Tensor),
    S(f64),
}

impl In {
    pub fn arg(&self) -> Arg<'_> {
        match self {
            In::T(t) => arg(t),
            In::S(v) => arg(v),
        }
    }
    fn array(&self) -> Array {
        match self {
            In::T(t) => array(t),
            In::S(v) => Array::scalar(*v),
        }
    }
}

/// Relative L2 error of `got` against `want` (shapes must agree).
pub fn rel_l2(got: &Tensor, want: &Array) -> f64 {
    assert_eq!(got.shape(), want.shape.as_slice(), "shape");
    let g = got.to_vec::<f32>().expect("readable");
    let mut err = 0.0;
    let mut norm = 0.0;
    for (&a, &b) in g.iter().zip(&want.data) {
        err += (a as f64 - b).powi(2);
        norm += b * b;
    }
    if norm == 0.0 {
        err.sqrt()
    } else {
        (err / norm).sqrt()
    }
}

/// The relative L2 error a CPU result of this dtype may show (`fuse_runtime::testing::tolerance`).
pub fn tolerance(dtype: DType) -> f64 {
    fuse_runtime::testing::tolerance(dtype, &Device::Cpu)
}

/// The least precise dtype among the tensors.
pub fn coarsest<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> DType {
    let rank = |d: DType| match d {
        DType::F16 => 1,
        DType::BF16 => 2,
        // f32; ids are exact, and blocks are read as their exact values: neither sets a float result's tolerance.
        _ => 0,
    };
    tensors.into_iter().map(|t| t.dtype()).max_by_key(|&d| rank(d)).unwrap_or(DType::F32)
}

/// Asserts that `outputs` match the reference on `args` within the tolerance of the coarsest dtype.
pub fn assert_matches_reference(g: &Graph, args: &[In], outputs: &[Tensor], what: &str) {
    let inputs: Vec<Array> = args.iter().map(In::array).collect();
    let want = eval(g, &inputs).expect("the reference evaluates");
    assert_eq!(outputs.len(), want.len(), "{what}: number of outputs");
    let arg_tensors = args.iter().filter_map(|a| match a {
        In::T(t) => Some(t),
        In::S(_) => None,
    });
    let dtype = coarsest(arg_tensors.chain(outputs));
    for (i, (got, want)) in outputs.iter().zip(&want).enumerate() {
        let e = rel_l2(got, want);
        assert!(e <= tolerance(dtype), "{what}: output {i} ({dtype}) relative error {e:e} > {:e}", tolerance(dtype));
    }
}

/// Runs `g` fused (the planner's plan), unfused, and with each of `plans`; every result must match the
/// reference. Returns the fused outputs.
pub fn check(g: &Graph, args: &[In], plans: &[Plan]) -> Vec<Tensor> {
    let f = FusedFn::from_graph(g.clone());
    let call: Vec<Arg<'_>> = args.iter().map(In::arg).collect();
    let fused = f.call_with(&call, Fusion::On).expect("fused call");
    assert_matches_reference(g, args, &fused, &format!("{} fused", g.name));
    let unfused = f.call_with(&call, Fusion::Off).expect("unfused call");
    assert_matches_reference(g, args, &unfused, &format!("{} unfused", g.name));
    for (i, plan) in plans.iter().enumerate() {
        let out = f.call_with_plan(plan, &call).expect("hand-planned call");
        assert_matches_reference(g, args, &out, &format!("{} hand plan {i}", g.name));
    }
    fused
}

/// A plan from groups given as (kind, nodes, prologue); inputs and outputs are derived from the graph.
pub fn plan(g: &Graph, groups: &[(GroupKind, Vec<NodeId>, Vec<NodeId>)]) -> Plan {
    let users = g.users();
    let mut out = Vec::new();
    for (kind, nodes, prologue) in groups {
        let mut nodes = nodes.clone();
        nodes.sort();
        let mut inputs = Vec::new();
        for &n in &nodes {
            for &a in &g.node(n).args {
                if !nodes.contains(&a) && !matches!(g.op(a), Op::Const(_)) && !inputs.contains(&a) {
                    inputs.push(a);
                }
            }
        }
        // A node is written if something outside the group reads it (directly or through a view).
        let read_outside = |n: NodeId| {
            users[n.index()].iter().any(|&u| !nodes.contains(&u) || is_free(g.op(u))) || g.outputs.contains(&n)
        };
        let outputs = nodes.iter().copied().filter(|&n| read_outside(n)).collect();
        let matmuls = nodes.iter().copied().filter(|&n| g.op(n) == Op::MatMul).collect();
        out.push(Group { kind: *kind, nodes, matmuls, prologue: prologue.clone(), inputs, outputs });
    }
    let p = Plan { groups: out };
    if let Err(e) = p.verify(g) {
        panic!("hand plan does not verify: {e}\n{}", g.to_text());
    }
    p
}
