//! Horizontal fusion: q, k and v projected from one normalised input by separate weights are one MultiGemm
//! group (the rms_norm its prologue, each bias its product's epilogue). On the GPU one template kernel
//! computes the three products (its blocks take one product each), or one launch per block type of the
//! weights; on the library path, three matmuls and an epilogue kernel per bias. Every path against the
//! reference interpreter, at odd widths and row counts.

use fuse::ir::quant::random_blocks;
use fuse::ir::GroupKind;
use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

#[path = "common/fused_fns.rs"]
mod fused_fns;
use fused_fns::{qkv_projections as qkv, qkv_projections_fused as qkv_fused};

/// Widths of q, k and v (GQA-like: k and v narrower), and the inner size.
const WIDTHS: [usize; 3] = [72, 24, 40];
const HIDDEN: usize = 64;

/// `[x, norm, wq, bq, wk, bk, wv]` on the CPU: x of `rows` rows, the weights of `dtype`.
fn operands(r: &mut TestRng, rows: usize, dtype: DType) -> Vec<Tensor> {
    let cpu = Device::Cpu;
    let mut t = vec![random(r, &[rows, HIDDEN], dtype, -1.0, 1.0, &cpu), random(r, &[HIDDEN], dtype, 0.5, 1.5, &cpu)];
    for (i, n) in WIDTHS.into_iter().enumerate() {
        t.push(random(r, &[n, HIDDEN], dtype, -0.3, 0.3, &cpu));
        if i < 2 {
            t.push(random(r, &[n], dtype, -0.5, 0.5, &cpu));
        }
    }
    t
}

fn call(t: &[Tensor]) -> Result<(Tensor, Tensor, Tensor)> {
    qkv(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6])
}

/// The three results against the reference interpreter on the same operands (on the CPU).
fn check(what: &str, got: (Tensor, Tensor, Tensor), operands: &[Tensor], dtype: DType, dev: &Device) {
    let cpu: Vec<Tensor> = operands.iter().map(|t| t.to_device(&Device::Cpu).unwrap()).collect();
    let args: Vec<_> = cpu.iter().map(fuse::arg).collect();
    let want = fuse::reference(qkv_fused(), &args).expect("reference");
    for (name, (got, want)) in ["q", "k", "v"].iter().zip([got.0, got.1, got.2].iter().zip(&want)) {
        assert_close(&format!("{what}: {name}"), got, want, dtype, dev);
    }
}

fn the_projections_are_one_group_and_match_the_reference(dev: &Device) {
    let plan = qkv_fused().plan(Fusion::On).expect("plan");
    let kinds: Vec<(GroupKind, usize, usize)> =
        plan.groups.iter().map(|g| (g.kind, g.matmuls.len(), g.prologue.len())).collect();
    assert_eq!(kinds.len(), 1, "one group: {kinds:?}");
    assert_eq!((kinds[0].0, kinds[0].1), (GroupKind::MultiGemm, 3));
    assert!(kinds[0].2 > 0, "the rms_norm is the group's prologue");
    let dtype = if dev.is_cuda() { DType::BF16 } else { DType::F32 };
    let mut r = TestRng::new(91);
    for rows in [1, 3, 37, 130] {
        let t: Vec<Tensor> = operands(&mut r, rows, dtype).iter().map(|t| t.to_device(dev).unwrap()).collect();
        let (q, k, v) = call(&t).expect("qkv");
        assert_eq!([q.shape(), k.shape(), v.shape()], [&[rows, 72][..], &[rows, 24], &[rows, 40]]);
        check(&format!("{rows} rows"), (q, k, v), &t, dtype, dev);
        // Again with new values in the same shapes: a replayed call reads them.
        let t2: Vec<Tensor> = operands(&mut r, rows, dtype).iter().map(|t| t.to_device(dev).unwrap()).collect();
        check(&format!("{rows} rows, again"), call(&t2).expect("qkv"), &t2, dtype, dev);
    }
}

fuse::device_tests!(the_projections_are_one_group_and_match_the_reference);

/// Every GEMM path a MultiGemm group may take on the GPU, forced: each skinny and mma config, cuBLAS.
#[test]
fn on_a_gpu_every_path_computes_every_product() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(92);
    let skinny = fuse::ir::codegen::SKINNY_CONFIGS.iter().map(|c| (format!("skinny:{}", c.name), c.splits > 1));
    let mma = fuse::ir::codegen::MMA_CONFIGS.iter().map(|c| (format!("mma:{}", c.name), false));
    let paths: Vec<(String, bool)> = skinny.chain(mma).chain([("cublas".to_string(), false)]).collect();
    for rows in [1, 5, 70] {
        let t: Vec<Tensor> = operands(&mut r, rows, DType::BF16).iter().map(|t| t.to_device(&gpu).unwrap()).collect();
        for (path, splits) in &paths {
            let got = fuse::tune::with_gemm_choice(path, || call(&t));
            if *splits {
                let e = got.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.contains("splits K"), "{path}: a split-K config is refused with a reason: {e}");
                continue;
            }
            check(
                &format!("{path}, {rows} rows"),
                got.unwrap_or_else(|e| panic!("{path}: {e}")),
                &t,
                DType::BF16,
                &gpu,
            );
        }
        let e = fuse::tune::with_gemm_choice("wgmma:n128", || call(&t)).err().map(|e| e.to_string());
        assert!(e.unwrap_or_default().contains("no Wgmma kernel"), "the wgmma template takes no MultiGemm group");
    }
}

/// q and k of one block type and v of another (a Q4_K_M file's choice): two launches of the quantized
/// kernel; and all three of one type: one launch.
#[test]
fn on_a_gpu_quantized_products_of_two_block_types_run_in_one_group() {
    let Some(gpu) = fuse::testing::gpu_or_skip() else { return };
    let mut r = TestRng::new(93);
    let hidden = 256;
    let paths: Vec<String> = fuse::ir::codegen::QUANT_SKINNY_CONFIGS
        .iter()
        .map(|c| format!("qskinny:{}", c.name))
        .chain(["mma:m64n64".to_string(), "cublas".to_string()])
        .collect();
    for types in [[DType::Q4_K, DType::Q4_K, DType::Q6_K], [DType::Q8_0; 3]] {
        for rows in [1, 4] {
            let cpu = Device::Cpu;
            let mut t = vec![
                random(&mut r, &[rows, hidden], DType::BF16, -1.0, 1.0, &cpu),
                random(&mut r, &[hidden], DType::BF16, 0.5, 1.5, &cpu),
            ];
            for (i, (n, dtype)) in WIDTHS.into_iter().zip(types).enumerate() {
                let blocks = n * hidden / dtype.block().unwrap().elements;
                let bytes = random_blocks(dtype, blocks, 300 + i as u64);
                t.push(Tensor::from_blocks(dtype, &[n, hidden], bytes, &cpu).unwrap());
                if i < 2 {
                    t.push(random(&mut r, &[n], DType::BF16, -0.5, 0.5, &cpu));
                }
            }
            let t: Vec<Tensor> = t.iter().map(|t| t.to_device(&gpu).unwrap()).collect();
            for path in &paths {
                match fuse::tune::with_gemm_choice(path, || call(&t)) {
                    Ok(got) => check(&format!("{path}, {types:?}, {rows} rows"), got, &t, DType::BF16, &gpu),
                    // The 8-bit bodies read some block types only: refused with the reason, never wrong.
                    Err(e) => assert!(path.starts_with("qskinny:x"), "{path}, {types:?}: {e}"),
                }
            }
        }
    }
}

/// A Qwen2 attention block as a model crate writes it from a file's separate q, k and v weights and biases.
struct Qwen2Attention {
    norm: Tensor,
    wq: Tensor,
    bq: Tensor,
    wk: Tensor,
    bk: Tensor,
    wv: Tensor,
    bv: Tensor,
    wo: Tensor,
    eps: f32,
    scale: f32,
}

#[fuse]
impl Qwen2Attention {
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        at: &Tensor,
        lens: &Tensor,
        hq: usize,
        hkv: usize,
        d: usize,
    ) -> Result<Tensor> {
        let (b, s) = (x.dim(0), x.dim(1));
        let h = rms_norm(x, &self.norm, self.eps);
        let q = (h.matmul(&self.wq.t()) + &self.bq).reshape(&[b, s, hq, d]);
        let k = (h.matmul(&self.wk.t()) + &self.bk).reshape(&[b, s, hkv, d]);
        let v = (h.matmul(&self.wv.t()) + &self.bv).reshape(&[b, s, hkv, d]);
        let q = rope(&q.transpose(1, 2), cos, sin);
        let k = rope(&k.transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&k, 2, at);
        let v_cache = v_cache.slice_set(&v.transpose(1, 2), 2, at);
        let a = attention_len(&q, &k_cache, &v_cache, lens, self.scale, true);
        Ok(x + a.transpose(1, 2).reshape(&[b, s, hq * d]).matmul(&self.wo.t()))
    }
}

#[test]
fn a_qwen2_block_with_separate_qkv_weights_projects_in_one_group() {
    let plan = Qwen2Attention::forward_fused().plan(Fusion::On).expect("plan");
    let gemms: Vec<(GroupKind, usize)> =
        plan.groups.iter().filter(|g| !g.matmuls.is_empty()).map(|g| (g.kind, g.matmuls.len())).collect();
    // The q/k/v projections with the rms_norm and the biases in one group; the output projection with the
    // residual in another. Before horizontal fusion the same block was a RowReduce group for the norm and
    // three Gemm groups (what `split_products` gives back).
    assert_eq!(gemms, [(GroupKind::MultiGemm, 3), (GroupKind::Gemm, 1)], "{}", plan.to_text());
    let projections = plan.groups.iter().find(|g| g.kind == GroupKind::MultiGemm).unwrap();
    let graph = Qwen2Attention::forward_fused().graph().expect("graph");
    let split = projections.split_products(graph);
    let kinds: Vec<GroupKind> = split.iter().map(|g| g.kind).collect();
    assert_eq!(kinds, [GroupKind::RowReduce, GroupKind::Gemm, GroupKind::Gemm, GroupKind::Gemm]);
    eprintln!(
        "qwen2 attention block: {} groups ({} before horizontal fusion)",
        plan.groups.len(),
        plan.groups.len() + split.len() - 1
    );
}
