//! End to end: functions written with `#[fuse]` compute what their traced graphs define. Each generated
//! function runs on the CPU with random non-zero inputs of odd shapes, and its outputs are compared with
//! the reference interpreter (`fuse::ir::interp::eval`, f64) on the function's own graph.

use fuse::ir::interp::{self, Array};
use fuse::ir::Graph;
use fuse::prelude::*;
use fuse::testing::TestRng;

/// Relative L2 error allowed for f32 results against the f64 reference.
const TOLERANCE: f64 = 1e-4;

#[fuse]
fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
    Ok(h.matmul(w_down))
}

struct Mlp {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

struct Block {
    norm: Tensor,
    mlp: Mlp,
    eps: f32,
}

impl Block {
    #[fuse]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let m = silu(h.matmul(&self.mlp.gate.t())) * h.matmul(&self.mlp.up.t());
        Ok(x + m.matmul(&self.mlp.down.t()))
    }
}

/// Candle's shape of model code: the forward pass is a trait method, so `#[fuse]` goes on the impl block.
trait Module {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
}

struct Lin {
    w: Tensor,
    b: Tensor,
}

#[fuse]
impl Module for Lin {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(gelu(xs.matmul(&self.w.t()) + &self.b))
    }
}

#[fuse]
fn attention_scores(q: &Tensor, k: &Tensor, scale: f64) -> Result<(Tensor, Tensor)> {
    let s = q.matmul(&k.t()) * scale;
    let p = softmax(s);
    (p, s.max(-1))
}

#[fuse]
fn every_op(x: &Tensor, w: &Tensor, v: &Tensor, s: f32) -> Result<(Tensor, Tensor)> {
    let a = exp(x) + log(x) + sqrt(x) + rsqrt(x) + tanh(x) + sigmoid(x) + silu(x);
    let b = gelu(x) + gelu_tanh(x) + relu(x - 1.0) + abs(x - 1.0) + square(x) + recip(x);
    let c = x.exp() - x.log() * x.sqrt() + x.rsqrt() / x.tanh() + x.sigmoid() + x.gelu() - x.recip();
    let d = maximum(&a, &b) - minimum(c, -x) + x.powf(s) + x.powf(2) - a.maximum(&c) / b.minimum(&c);
    let e = softmax(&d) + rms_norm(&d, w, 1e-5) + d.sum(-1) * d.mean(-1) - d.max(-1);
    Ok((e.matmul(&v.t()), e.to_dtype(DType::F32)))
}

/// The line of `centered`'s `x.mean(-1)`, which its label names.
const CENTERED_MEAN_LINE: u32 = line!() + 4;

#[fuse]
fn centered(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let c = x - x.mean(-1);
    Ok(c.matmul(&w.t()))
}

/// A random tensor (uniform in `lo..hi`, away from zero when the range allows) and its reference copy.
fn random(rng: &mut TestRng, shape: &[usize], lo: f32, hi: f32) -> (Tensor, Array) {
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| loop {
            let v = rng.uniform(lo, hi);
            if v.abs() > 1e-2 {
                break v;
            }
        })
        .collect();
    let array = Array::new(shape.to_vec(), data.iter().map(|&v| f64::from(v)).collect());
    let tensor = Tensor::from_vec(data, shape, &Device::Cpu).expect("tensor from random data");
    (tensor, array)
}

fn rel_l2_error(got: &[f32], want: &[f64]) -> f64 {
    let diff: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Every output of the generated function against the reference on the same graph and arguments.
fn assert_matches_reference(what: &str, graph: &Graph, inputs: &[Array], outputs: &[&Tensor]) {
    let want = interp::eval(graph, inputs).unwrap_or_else(|e| panic!("{what}: reference failed: {e:?}"));
    assert_eq!(outputs.len(), want.len(), "{what}: number of outputs");
    for (k, (got, want)) in outputs.iter().zip(&want).enumerate() {
        assert_eq!(got.shape(), want.shape.as_slice(), "{what}: shape of output {k}");
        let values: Vec<f32> = got.to_vec::<f32>().expect("to_vec");
        assert!(values.iter().all(|v| v.is_finite()), "{what}: output {k} is not finite");
        let err = rel_l2_error(&values, &want.data);
        assert!(err < TOLERANCE, "{what}: output {k}: relative L2 error {err:.2e} >= {TOLERANCE:.0e}");
    }
}

/// The reference arguments in the graph's input order, looked up by the names the macro gave them.
fn inputs_by_name(graph: &Graph, named: &[(&str, &Array)]) -> Vec<Array> {
    graph
        .inputs
        .iter()
        .map(|input| {
            let found = named.iter().find(|(name, _)| *name == input.name);
            let (_, array) = found.unwrap_or_else(|| panic!("graph input `{}` has no test value", input.name));
            (*array).clone()
        })
        .collect()
}

#[test]
fn mlp_matches_reference_on_odd_shapes() -> Result<()> {
    let mut rng = TestRng::new(1);
    let graph = mlp_fused().graph()?;
    for (rows, dim, hidden) in [(1, 1, 1), (3, 17, 5), (1, 3, 17), (17, 5, 3)] {
        let (x, xa) = random(&mut rng, &[rows, dim], -1.0, 1.0);
        let (wg, wga) = random(&mut rng, &[dim, hidden], -1.0, 1.0);
        let (wu, wua) = random(&mut rng, &[dim, hidden], -1.0, 1.0);
        let (wd, wda) = random(&mut rng, &[hidden, dim], -1.0, 1.0);
        let y = mlp(&x, &wg, &wu, &wd)?;
        let inputs = inputs_by_name(&graph, &[("x", &xa), ("w_gate", &wga), ("w_up", &wua), ("w_down", &wda)]);
        assert_matches_reference(&format!("mlp {rows}x{dim}x{hidden}"), &graph, &inputs, &[&y]);
    }
    Ok(())
}

#[test]
fn batched_mlp_matches_reference() -> Result<()> {
    let mut rng = TestRng::new(2);
    let graph = mlp_fused().graph()?;
    let (x, xa) = random(&mut rng, &[3, 5, 17], -1.0, 1.0);
    let (wg, wga) = random(&mut rng, &[17, 3], -1.0, 1.0);
    let (wu, wua) = random(&mut rng, &[17, 3], -1.0, 1.0);
    let (wd, wda) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let y = mlp(&x, &wg, &wu, &wd)?;
    let inputs = inputs_by_name(&graph, &[("x", &xa), ("w_gate", &wga), ("w_up", &wua), ("w_down", &wda)]);
    assert_matches_reference("batched mlp", &graph, &inputs, &[&y]);
    Ok(())
}

#[test]
fn method_reads_fields_of_self() -> Result<()> {
    let mut rng = TestRng::new(3);
    let graph = Block::forward_fused().graph()?;
    let names: Vec<&str> = graph.inputs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["x", "self.norm", "self.eps", "self.mlp.gate", "self.mlp.up", "self.mlp.down"]);
    let (dim, hidden) = (17, 3);
    let (x, xa) = random(&mut rng, &[5, dim], -1.0, 1.0);
    let (norm, norma) = random(&mut rng, &[dim], 0.5, 1.5);
    let (gate, gatea) = random(&mut rng, &[hidden, dim], -1.0, 1.0);
    let (up, upa) = random(&mut rng, &[hidden, dim], -1.0, 1.0);
    let (down, downa) = random(&mut rng, &[dim, hidden], -1.0, 1.0);
    let block = Block { norm, mlp: Mlp { gate, up, down }, eps: 1e-5 };
    let y = block.forward(&x)?;
    let eps = Array::scalar(f64::from(block.eps));
    let inputs = inputs_by_name(
        &graph,
        &[
            ("x", &xa),
            ("self.norm", &norma),
            ("self.eps", &eps),
            ("self.mlp.gate", &gatea),
            ("self.mlp.up", &upa),
            ("self.mlp.down", &downa),
        ],
    );
    assert_matches_reference("Block::forward", &graph, &inputs, &[&y]);
    Ok(())
}

#[test]
fn trait_impl_method_matches_reference() -> Result<()> {
    let mut rng = TestRng::new(8);
    let graph = Lin::forward_fused().graph()?;
    assert_eq!(graph.name, "Lin::forward");
    let (xs, xsa) = random(&mut rng, &[5, 17], -1.0, 1.0);
    let (w, wa) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let (b, ba) = random(&mut rng, &[3], -1.0, 1.0);
    let lin = Lin { w, b };
    let module: &dyn Module = &lin;
    let y = module.forward(&xs)?;
    let inputs = inputs_by_name(&graph, &[("xs", &xsa), ("self.w", &wa), ("self.b", &ba)]);
    assert_matches_reference("<Lin as Module>::forward", &graph, &inputs, &[&y]);
    Ok(())
}

#[test]
fn tuple_return_with_scalar_parameter() -> Result<()> {
    let mut rng = TestRng::new(4);
    let graph = attention_scores_fused().graph()?;
    let (q, qa) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let (k, ka) = random(&mut rng, &[5, 17], -1.0, 1.0);
    let scale = 0.25_f64;
    let (p, m) = attention_scores(&q, &k, scale)?;
    let inputs = inputs_by_name(&graph, &[("q", &qa), ("k", &ka), ("scale", &Array::scalar(scale))]);
    assert_matches_reference("attention_scores", &graph, &inputs, &[&p, &m]);
    assert_eq!(m.shape(), &[3, 1]);
    Ok(())
}

#[test]
fn every_op_matches_reference() -> Result<()> {
    let mut rng = TestRng::new(5);
    let graph = every_op_fused().graph()?;
    // Positive inputs: `log`, `sqrt`, `rsqrt` and `powf` are defined there.
    let (x, xa) = random(&mut rng, &[3, 17], 0.5, 1.5);
    let (w, wa) = random(&mut rng, &[17], 0.5, 1.5);
    let (v, va) = random(&mut rng, &[5, 17], -1.0, 1.0);
    let s = 1.5_f32;
    let (projected, e) = every_op(&x, &w, &v, s)?;
    let sa = Array::scalar(f64::from(s));
    let inputs = inputs_by_name(&graph, &[("x", &xa), ("w", &wa), ("v", &va), ("s", &sa)]);
    assert_matches_reference("every_op", &graph, &inputs, &[&projected, &e]);
    Ok(())
}

#[test]
fn same_inputs_give_identical_results() -> Result<()> {
    let mut rng = TestRng::new(6);
    let (q, _) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let (k, _) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let (p1, _) = attention_scores(&q, &k, 0.5)?;
    let (p2, _) = attention_scores(&q, &k, 0.5)?;
    assert_eq!(p1.to_vec::<f32>()?, p2.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn labels_are_the_users_text_and_where_it_is() -> Result<()> {
    let graph = centered_fused().graph()?;
    let labels: Vec<&str> = graph.ids().map(|id| graph.label_of(id)).collect();
    let file = file!();
    let mean = format!("x.mean(-1) at {file}:{CENTERED_MEAN_LINE}");
    assert!(labels.contains(&mean.as_str()), "no label {mean:?} in {labels:#?}");
    let matmul = format!("c.matmul(&w.t()) at {file}:{}", CENTERED_MEAN_LINE + 1);
    assert!(labels.contains(&matmul.as_str()), "no label {matmul:?} in {labels:#?}");
    let block = Block::forward_fused().graph()?;
    let norm = block.ids().map(|id| block.label_of(id)).find(|l| l.starts_with("rms_norm("));
    assert_eq!(norm.and_then(|l| l.split(" at ").next()), Some("rms_norm(x, &self.norm, self.eps)"));
    Ok(())
}

#[test]
fn shape_error_names_the_function_and_the_expression() {
    let mut rng = TestRng::new(7);
    let (x, _) = random(&mut rng, &[3, 17], -1.0, 1.0);
    let (wg, _) = random(&mut rng, &[16, 5], -1.0, 1.0);
    let (wu, _) = random(&mut rng, &[17, 5], -1.0, 1.0);
    let (wd, _) = random(&mut rng, &[5, 17], -1.0, 1.0);
    let message = match mlp(&x, &wg, &wu, &wd) {
        Ok(y) => panic!("multiplying [3, 17] by [16, 5] succeeded with shape {:?}", y.shape()),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("mlp"), "the message does not name the function: {message}");
    assert!(message.contains("x.matmul(w_gate)"), "the message does not quote the expression: {message}");
    assert!(message.contains(&format!(" at {}:", file!())), "the message does not say where: {message}");
    assert!(message.contains("17") && message.contains("16"), "the message does not give the shapes: {message}");
}
