//! What `scripts/gpu/gpu-sanitize.sh` runs under each of compute-sanitizer's tools (memcheck, racecheck,
//! synccheck, initcheck): every config of every GEMM template once (the skinny template with and without its
//! in-kernel prologue, its split-K config, wgmma, mma) and the pointwise and row kernels, at small odd shapes
//! that still reach every code path: several row blocks, N and K tails, each skinny warp's weight ring
//! wrapping around (the down projection's K = 1288 gives 41 chunks of 32, more than 4 stages for each of 8
//! warps), the staged-X ring shared by 2, 4 and 8 warps. Each result is checked against the reference, so a
//! run under a tool is a correctness run too. Tuning is not exercised here (every GEMM path is forced).
//! Also each model-op kernel and cat once per dtype at odd shapes (strided operands, GQA, causal and not);
//! attention on the decode kernel (rows of a kv head in one block) with its keys split across blocks and
//! merged by the last split block, and on the prefill kernel with its splits merged by the combine kernel,
//! several query tiles with causal splits past a tile's last key (empty), d = 136 (a lane's third channel
//! pair, partly used; on the decode kernel the lanes past channel 136 load nothing) and d = 256 (more than 48 KB of shared memory);
//! attention_len with splits past a batch's key count (no key loaded there), a batch of no keys at all and
//! lens read at an offset into a longer tensor.

use crate::decode_step::{decode_step_after_kernel_fused, decode_step_attention_fused};
use crate::fused_fns::{
    chain10_fused, compare_fused, ffn_block_fused, llama_mlp_fused, masked_fused, norm_and_cast_fused,
    qkv_projections_fused, reductions_fused, scaled_projection_fused, unary_c_fused,
};
use crate::{assert_close, check, gpu, random, rng};
use fuse::ir::codegen::{attention_launch, AttentionShape, MMA_CONFIGS, SKINNY_CONFIGS, WGMMA_CONFIGS};
use fuse::prelude::*;

const ROWS: [usize; 2] = [3, 17];
const HIDDEN: usize = 136; // 4 chunks of 32 and a tail of 8
const INTER: usize = 1288; // no multiple of any block's columns; 41 chunks of 32 for the down projection

/// Every template path that holds `dual` products, as path names; wgmma only on sm_90 (said when skipped).
fn template_paths(dev: &Device, dual: bool) -> Vec<String> {
    let sm90 = matches!(dev, Device::Cuda(c) if c.arch().starts_with("sm_90"));
    if !sm90 {
        eprintln!("gpu::sanitize: SKIPPED the wgmma configs (this GPU is not sm_90)");
    }
    let skinny = SKINNY_CONFIGS.iter().map(|c| format!("skinny:{}", c.name));
    let wgmma = WGMMA_CONFIGS.iter().filter(|c| sm90 && c.supports(dual)).map(|c| format!("wgmma:{}", c.name));
    let mma = MMA_CONFIGS.iter().filter(|c| c.supports(dual)).map(|c| format!("mma:{}", c.name));
    skinny.chain(wgmma).chain(mma).collect()
}

fn forced(what: &str, path: &str, f: &FusedFn, args: &[fuse::Arg<'_>]) -> Vec<Tensor> {
    fuse::tune::with_gemm_choice(path, || f.call_with(args, Fusion::On))
        .unwrap_or_else(|e| panic!("{what} {path}: {e}"))
}

#[test]
fn every_gemm_template_config_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(111);
    for rows in ROWS {
        let x = random(&mut r, &[rows, HIDDEN], DType::BF16, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[HIDDEN], DType::BF16, 0.5, 1.5, &dev);
        let [wg, wu] = [0; 2].map(|_| random(&mut r, &[INTER, HIDDEN], DType::BF16, -0.2, 0.2, &dev));
        let wd = random(&mut r, &[HIDDEN, INTER], DType::BF16, -0.2, 0.2, &dev);
        // ffn_block: the dual GEMM with rms_norm as its prologue (in-kernel on the skinny configs of 8 rows),
        // the down projection adding the residual; llama_mlp: the dual GEMM with no prologue.
        let ffn =
            [fuse::arg(&x), fuse::arg(&norm), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd), fuse::arg(&1e-5f32)];
        let mlp = [fuse::arg(&x), fuse::arg(&wg), fuse::arg(&wu), fuse::arg(&wd)];
        for (name, f, args) in [("ffn_block", ffn_block_fused(), &ffn[..]), ("llama_mlp", llama_mlp_fused(), &mlp[..])]
        {
            let want = fuse::reference(f, args).expect("reference");
            for path in template_paths(&dev, true) {
                let got = forced(name, &path, f, args);
                assert_close(&format!("{name} {path} m={rows}"), &got[0], &want[0], DType::BF16);
            }
        }
        // One product with a prologue kernel and an activation epilogue: the configs too large for two.
        let scale = random(&mut r, &[rows, 1], DType::BF16, 0.5, 1.5, &dev);
        let args = [fuse::arg(&x), fuse::arg(&scale), fuse::arg(&wg)];
        let want = fuse::reference(scaled_projection_fused(), &args).expect("reference");
        let single = template_paths(&dev, false).into_iter().filter(|p| !template_paths(&dev, true).contains(p));
        for path in single {
            let got = forced("scaled_projection", &path, scaled_projection_fused(), &args);
            assert_close(&format!("scaled_projection {path} m={rows}"), &got[0], &want[0], DType::BF16);
        }
    }
}

/// A MultiGemm group (q, k and v of one normalised input, each block one product's tile) on every skinny
/// config that does not split K and every mma config; then with quantized weights of two block types (two
/// launches of the quantized skinny kernel, each leaving the other's products no blocks).
#[test]
fn horizontal_gemm_products_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(113);
    let mma = MMA_CONFIGS.iter().map(|c| format!("mma:{}", c.name));
    let paths: Vec<String> =
        SKINNY_CONFIGS.iter().filter(|c| c.splits == 1).map(|c| format!("skinny:{}", c.name)).chain(mma).collect();
    for rows in ROWS {
        let x = random(&mut r, &[rows, HIDDEN], DType::BF16, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[HIDDEN], DType::BF16, 0.5, 1.5, &dev);
        let w: Vec<Tensor> =
            [72, 24, 40].iter().map(|&n| random(&mut r, &[n, HIDDEN], DType::BF16, -0.3, 0.3, &dev)).collect();
        let b: Vec<Tensor> = [72, 24].iter().map(|&n| random(&mut r, &[n], DType::BF16, -0.5, 0.5, &dev)).collect();
        let args = [&x, &norm, &w[0], &b[0], &w[1], &b[1], &w[2]].map(fuse::arg);
        let want = fuse::reference(qkv_projections_fused(), &args).expect("reference");
        for path in &paths {
            let got = forced("qkv_projections", path, qkv_projections_fused(), &args);
            for (j, (got, want)) in got.iter().zip(&want).enumerate() {
                assert_close(&format!("qkv_projections {path} m={rows} product {j}"), got, want, DType::BF16);
            }
        }
        let hidden = 256;
        let x = random(&mut r, &[rows, hidden], DType::BF16, -1.0, 1.0, &dev);
        let norm = random(&mut r, &[hidden], DType::BF16, 0.5, 1.5, &dev);
        let blocks = |dtype: DType, n: usize, seed: u64| {
            let bytes = fuse::ir::quant::random_blocks(dtype, n * hidden / dtype.block().unwrap().elements, seed);
            Tensor::from_blocks(dtype, &[n, hidden], bytes, &Device::Cpu).unwrap().to_device(&dev).unwrap()
        };
        let w = [blocks(DType::Q4_K, 72, 1), blocks(DType::Q4_K, 24, 2), blocks(DType::Q6_K, 40, 3)];
        let args = [&x, &norm, &w[0], &b[0], &w[1], &b[1], &w[2]].map(fuse::arg);
        let want = fuse::reference(qkv_projections_fused(), &args).expect("reference");
        let path = format!("qskinny:{}", fuse::ir::codegen::QUANT_SKINNY_CONFIGS[0].name);
        let got = forced("qkv_projections", &path, qkv_projections_fused(), &args);
        for (j, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("qkv_projections {path} Q4_K/Q6_K m={rows} product {j}"), got, want, DType::BF16);
        }
    }
}

#[test]
fn pointwise_and_row_kernels_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(112);
    for dtype in [DType::F32, DType::BF16] {
        for (rows, cols) in [(3, 17), (17, 1000), (2, 4095)] {
            let x = random(&mut r, &[rows, cols], dtype, -1.0, 1.0, &dev);
            let bias = random(&mut r, &[cols], dtype, -0.5, 0.5, &dev);
            let w = random(&mut r, &[cols], dtype, 0.5, 1.5, &dev);
            check(
                &format!("chain10 {rows}x{cols}"),
                chain10_fused(),
                &[fuse::arg(&x), fuse::arg(&bias), fuse::arg(&0.7f32)],
                dtype,
            );
            check(&format!("reductions {rows}x{cols}"), reductions_fused(), &[fuse::arg(&x)], dtype);
            check(&format!("unary_c {rows}x{cols}"), unary_c_fused(), &[fuse::arg(&x)], dtype);
            let y = random(&mut r, &[rows, cols], dtype, -1.0, 1.0, &dev);
            check(&format!("compare {rows}x{cols}"), compare_fused(), &[fuse::arg(&x), fuse::arg(&y)], dtype);
            // Every key kept (keys 0..8 behind a query at 8, a window of 9: no comparison near its bound), a
            // 0/1 mask per row.
            let q_pos = Tensor::full(8.0, &[rows, 1], dtype, &dev).expect("q_pos");
            let k_pos = random(&mut r, &[cols], dtype, 0.0, 8.0, &dev);
            let zero = Tensor::zeros(&[1], dtype, &dev).expect("zero");
            let mask = x.narrow(1, 0, 1).expect("narrow").gt(&zero).expect("gt");
            let window = 9.0f32;
            let args = [fuse::arg(&y), fuse::arg(&q_pos), fuse::arg(&k_pos), fuse::arg(&window), fuse::arg(&mask)];
            check(&format!("masked {rows}x{cols}"), masked_fused(), &args, dtype);
            check(
                &format!("norm_and_cast {rows}x{cols}"),
                norm_and_cast_fused(),
                &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&1e-5f64)],
                dtype,
            );
        }
    }
}

/// A ragged decode step: rope with one table row per sequence, the cache appends at per-sequence offsets.
#[fuse]
fn ragged_append(
    k: &Tensor,
    v: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    at: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let k_cache = k_cache.slice_set(&rope(&k.transpose(1, 2), cos, sin), 2, at);
    (k_cache, v_cache.slice_set(&v.transpose(1, 2), 2, at))
}

/// Each sequence of a batch at its own position: rope's [b, 1, d/2] tables and the copy kernel's
/// per-sequence offsets (three sequences, two heads, d = 40, a capacity of 7), in f32 and bf16.
#[test]
fn ragged_append_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(114);
    for dtype in [DType::F32, DType::BF16] {
        let (b, h, d, capacity) = (3, 2, 40, 7);
        let [k, v] = [0; 2].map(|_| random(&mut r, &[b, 1, h, d], dtype, -1.0, 1.0, &dev));
        let [cos, sin] = [0; 2].map(|_| random(&mut r, &[b, 1, d / 2], dtype, -1.0, 1.0, &dev));
        let caches = || [0; 2].map(|_| Tensor::zeros(&[b, h, capacity, d], dtype, &dev).unwrap());
        let (mine, theirs) = (caches(), caches());
        let at = Tensor::from_vec(vec![0u32, 6, 3], &[b], &dev).unwrap();
        let args = [&k, &v, &cos, &sin, &mine[0], &mine[1], &at].map(fuse::arg);
        let got = ragged_append_fused().call(&args).expect("ragged append");
        let args = [&k, &v, &cos, &sin, &theirs[0], &theirs[1], &at].map(fuse::arg);
        let want = fuse::reference(ragged_append_fused(), &args).expect("reference");
        assert_close(&format!("ragged keys {dtype}"), &got[0], &want[0], dtype);
        assert_close(&format!("ragged values {dtype}"), &got[1], &want[1], dtype);
    }
}

#[fuse]
fn running_sum(y: &Tensor) -> Result<Tensor> {
    Ok(y.t().cumsum(-1))
}

#[fuse]
fn sort_and_pick(y: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let (top, top_indices) = y.t().topk(40);
    let (_wide, wide_indices) = y.t().topk(4500);
    Ok((y.t().arg_sort_last_dim(false), top, top_indices, wide_indices))
}

#[fuse]
fn grouped_conv(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(silu(x.conv2d(w, 1, 2, 1, 2) + b.reshape(&[1, 6, 1, 1])))
}

#[fuse]
fn lookup(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    Ok(embedding(ids, table))
}

#[fuse]
fn pick_rotate_join(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    // x [2, 3, seq, d] read transposed: rope and argmax see strided rows, cat a strided part.
    let xt = x.transpose(1, 2);
    (xt.argmax(-1), rope(&x.transpose(0, 1), cos, sin), cat(&[x, &xt.transpose(1, 2), &exp(x)], 2))
}

#[fuse]
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention(&q.transpose(1, 2), k, v, scale, false))
}

#[fuse]
fn attend_causal(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention(&q.transpose(1, 2), k, v, scale, true))
}

#[test]
fn model_kernels_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let mut r = rng(113);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ids = Tensor::from_vec(vec![0u32, 36, 5, 17, 36], &[5], &dev).expect("ids");
        let table = random(&mut r, &[37, 19], dtype, -1.0, 1.0, &dev);
        check(&format!("embedding {dtype}"), lookup_fused(), &[fuse::arg(&ids), fuse::arg(&table)], dtype);
        let (seq, d) = (7, 10);
        let x = random(&mut r, &[2, 3, seq, d], dtype, -2.0, 2.0, &dev);
        let [cos, sin] = [0; 2].map(|_| random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, &dev));
        let args = [fuse::arg(&x), fuse::arg(&cos), fuse::arg(&sin)];
        let want = fuse::reference(pick_rotate_join_fused(), &args).expect("reference");
        let got = pick_rotate_join_fused().call(&args).expect("argmax, rope, cat");
        assert_close(&format!("argmax {dtype}"), &got[0], &want[0], DType::U32);
        assert_close(&format!("rope {dtype}"), &got[1], &want[1], dtype);
        assert_close(&format!("cat {dtype}"), &got[2], &want[2], dtype);
        // cumsum: rows of 300 (two chunks of a block's 256 columns), read through a transpose.
        let y = random(&mut r, &[300, 3], dtype, -1.0, 1.0, &dev);
        let sums = y.t().and_then(|t| t.cumsum(-1)).expect("cumsum");
        let want = fuse::reference(running_sum_fused(), &[fuse::arg(&y)]).expect("reference");
        assert_close(&format!("cumsum {dtype}"), &sums, &want[0], dtype);
        // Sorts through a transpose: rows of 9,000 (chunks of 4,096 in shared memory and the wider steps
        // on the output), a top-k selected (40) and one sorted in the workspace (4,500), and their gathers.
        let y = random(&mut r, &[9000, 2], dtype, -1.0, 1.0, &dev);
        let got = sort_and_pick_fused().call(&[fuse::arg(&y)]).expect("sort, topk");
        let want = fuse::reference(sort_and_pick_fused(), &[fuse::arg(&y)]).expect("reference");
        assert_close(&format!("arg_sort_last_dim {dtype}"), &got[0], &want[0], DType::U32);
        assert_close(&format!("topk {dtype}"), &got[1], &want[1], dtype);
        assert_close(&format!("topk indices {dtype}"), &got[2], &want[2], DType::U32);
        assert_close(&format!("wide topk indices {dtype}"), &got[3], &want[3], DType::U32);
        // A padded, strided, grouped convolution (unfold, a batched GEMM, a copy back) with a bias and silu.
        let x = random(&mut r, &[2, 4, 9, 7], dtype, -1.0, 1.0, &dev);
        let (w, b) =
            (random(&mut r, &[6, 2, 3, 3], dtype, -0.5, 0.5, &dev), random(&mut r, &[6], dtype, -0.5, 0.5, &dev));
        check(&format!("conv2d {dtype}"), grouped_conv_fused(), &[fuse::arg(&x), fuse::arg(&w), fuse::arg(&b)], dtype);
        // q [b, sq, hq, d] transposed to heads; GQA 6 over 2 (3 rows a query in a tile of 16 rows). Whether each
        // case splits its keys and has several query tiles (on this GPU): 5 queries over 131 keys, decode
        // kernel (15 rows), 2 splits merged by the last; 40 queries over 70 keys (prefill kernel, keys in
        // tiles of 32), 8 query tiles, split; one query over 9 keys, decode, one split; 17 queries of
        // d = 256 in 4 query tiles over 40 keys, split.
        let Device::Cuda(cuda) = &dev else { panic!("gpu() gives a CUDA device") };
        for (queries, keys, d, split, tiles) in
            [(5, 131, 64, true, false), (40, 70, 64, true, true), (1, 9, 136, false, false), (17, 40, 256, true, true)]
        {
            let shape = AttentionShape { batch: 2, q_heads: 6, queries, kv_heads: 2, keys, d };
            let launch = attention_launch(shape, cuda.sm_count());
            assert_eq!((launch.splits > 1, launch.q_tiles > 1), (split, tiles), "{shape:?}: {launch:?}");
            assert_eq!(launch.decode, queries * 3 <= 16, "{shape:?}: {launch:?}");
            let q = random(&mut r, &[2, queries, 6, d], dtype, -1.0, 1.0, &dev);
            let [k, v] = [0; 2].map(|_| random(&mut r, &[2, 2, keys, d], dtype, -1.0, 1.0, &dev));
            let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&0.3f32)];
            check(&format!("attention sq {queries} skv {keys} d {d} {dtype}"), attend_fused(), &args, dtype);
            check(
                &format!("causal attention sq {queries} skv {keys} d {d} {dtype}"),
                attend_causal_fused(),
                &args,
                dtype,
            );
        }
    }
}

/// lens is `lens_at_1[1..3]`: the kernel reads it at an offset into a longer tensor.
#[fuse]
fn attend_len(q: &Tensor, k: &Tensor, v: &Tensor, lens_at_1: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention_len(&q.transpose(1, 2), k, v, &lens_at_1.narrow(0, 1, 2), scale, false))
}

#[fuse]
fn attend_len_causal(q: &Tensor, k: &Tensor, v: &Tensor, lens_at_1: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention_len(&q.transpose(1, 2), k, v, &lens_at_1.narrow(0, 1, 2), scale, true))
}

#[test]
fn attention_len_once() {
    let Some((dev, _gpu)) = gpu() else { return };
    let Device::Cuda(cuda) = &dev else { panic!("gpu() gives a CUDA device") };
    let mut r = rng(114);
    let (q_heads, kv_heads, capacity, d) = (6, 2, 300, 64);
    for dtype in [DType::F32, DType::BF16] {
        // Decode and 5 queries over a cache of 300 positions (both on the decode kernel), split (from the
        // capacity) into key ranges, fewer of which the smaller counts use; the positions past each count
        // are NaN and never loaded.
        for (queries, counts) in [(1, [0, 100]), (1, [300, 3]), (5, [5, 200])] {
            let launch = attention_launch(
                AttentionShape { batch: 2, q_heads, queries, kv_heads, keys: capacity, d },
                cuda.sm_count(),
            );
            assert!(launch.splits > 1, "{launch:?}");
            let [k, v] = [0; 2].map(|_| {
                let data: Vec<f32> = (0..2 * kv_heads * capacity * d)
                    .map(|i| {
                        if i / d % capacity < counts[i / (kv_heads * capacity * d)] {
                            r.uniform(-1.0, 1.0)
                        } else {
                            f32::NAN
                        }
                    })
                    .collect();
                let cache =
                    Tensor::from_vec(data, &[2, kv_heads, capacity, d], &Device::Cpu).and_then(|t| t.to_dtype(dtype));
                cache.and_then(|t| t.to_device(&dev)).expect("cache")
            });
            let lens = Tensor::from_vec(vec![7u32, counts[0] as u32, counts[1] as u32], &[3], &dev).expect("lens");
            let q = random(&mut r, &[2, queries, q_heads, d], dtype, -1.0, 1.0, &dev);
            let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&lens), fuse::arg(&0.3f32)];
            let what = format!("attention_len sq {queries} over {counts:?} of {capacity} keys {dtype}");
            check(&what, attend_len_fused(), &args, dtype);
            if counts.iter().all(|&c| c >= queries) {
                check(&format!("causal {what}"), attend_len_causal_fused(), &args, dtype);
            }
        }
        // A decode step's rope, cache appends and attention in one launch, at positions that use one split
        // and several; the caches are NaN at the new position (until the kernel writes it).
        for at in [40, 200] {
            let [k, v] = [0; 2].map(|_| {
                let data: Vec<f32> = (0..2 * kv_heads * capacity * d)
                    .map(|i| if i / d % capacity != at { r.uniform(-1.0, 1.0) } else { f32::NAN })
                    .collect();
                Tensor::from_vec(data, &[2, kv_heads, capacity, d], &Device::Cpu)
                    .and_then(|t| t.to_dtype(dtype))
                    .and_then(|t| t.to_device(&dev))
                    .expect("cache")
            });
            let qkv = random(&mut r, &[2, 1, q_heads + 2 * kv_heads, d], dtype, -1.0, 1.0, &dev);
            let [cos, sin] = [0; 2].map(|_| random(&mut r, &[1, d / 2], dtype, -1.0, 1.0, &dev));
            let position = Tensor::from_vec(vec![at as u32], &[1], &dev).expect("at");
            let lens = Tensor::from_vec(vec![at as u32 + 1; 2], &[2], &dev).expect("lens");
            let args = [&qkv, &cos, &sin, &k, &v, &position, &lens].map(fuse::arg);
            let heads = q_heads + kv_heads;
            let args =
                [&args[..], &[fuse::arg(&q_heads), fuse::arg(&kv_heads), fuse::arg(&heads), fuse::arg(&0.125f32)]]
                    .concat();
            check(&format!("decode step at {at} of {capacity} {dtype}"), decode_step_attention_fused(), &args, dtype);
            // After a kernel of its own call: the keys and values loaded before the grid wait.
            let qkv_scale = random(&mut r, &[d], dtype, 0.5, 1.5, &dev);
            let after = [&qkv, &qkv_scale, &cos, &sin, &k, &v, &position, &lens].map(fuse::arg);
            let after =
                [&after[..], &[fuse::arg(&q_heads), fuse::arg(&kv_heads), fuse::arg(&heads), fuse::arg(&0.125f32)]]
                    .concat();
            check(
                &format!("decode step after a kernel at {at} of {capacity} {dtype}"),
                decode_step_after_kernel_fused(),
                &after,
                dtype,
            );
        }
    }
}
