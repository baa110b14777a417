//! The model ops (`embedding`, `argmax`, `rope`, `attention`, `attention_len`) and u32 token ids, traced by `#[fuse]`, fused and
//! unfused, against the reference interpreter on random inputs with odd shapes, on each device (the GPU with
//! its tolerances, `fuse::testing::tolerance`), and their errors, the same on each device.

#[path = "common/decode_step.rs"]
mod decode_step;

use decode_step::{decode_step_after_kernel_fused, decode_step_attention_fused};
use fuse::prelude::*;
use fuse::testing::{check_against_reference, random, TestRng};
use fuse::{Arg, Fusion};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[fuse]
fn lookup(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    Ok(embedding(ids, table))
}

#[fuse]
fn pick(x: &Tensor) -> Result<Tensor> {
    Ok(x.argmax(-1))
}

#[fuse]
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    Ok(rope(x, cos, sin))
}

#[fuse]
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention(q, k, v, scale, false))
}

#[fuse]
fn attend_causal(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention(q, k, v, scale, true))
}

/// Decode and prefill as a model runs them: q [b, sq, hq, d] read as heads, k and v the first `used`
/// positions of a longer cache [b, hkv, capacity, d] (a narrow view along the positions).
#[fuse]
fn attend_cache(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, used: usize, scale: f32) -> Result<Tensor> {
    Ok(attention(&q.transpose(1, 2), &k_cache.narrow(2, 0, used), &v_cache.narrow(2, 0, used), scale, false))
}

#[fuse]
fn attend_cache_causal(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, used: usize, scale: f32) -> Result<Tensor> {
    Ok(attention(&q.transpose(1, 2), &k_cache.narrow(2, 0, used), &v_cache.narrow(2, 0, used), scale, true))
}

/// A step over a whole preallocated cache: batch b attends over its first lens[b] keys (device data).
#[fuse]
fn attend_len(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, lens: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention_len(q, k_cache, v_cache, lens, scale, false))
}

#[fuse]
fn attend_len_causal(q: &Tensor, k_cache: &Tensor, v_cache: &Tensor, lens: &Tensor, scale: f32) -> Result<Tensor> {
    Ok(attention_len(q, k_cache, v_cache, lens, scale, true))
}

/// Pointwise work on both sides of the model ops: fused, it runs in groups of its own around them.
#[fuse]
fn rotate_and_attend(q: &Tensor, k: &Tensor, cos: &Tensor, sin: &Tensor, v: &Tensor) -> Result<Tensor> {
    let q = rope(&(q * 2.0), cos, sin);
    let k = rope(k, cos, sin);
    Ok(silu(attention(&q, &k, v, 0.125, true)) + 1.0)
}

/// `f` fused and unfused against the reference on `dev`.
fn check(what: &str, f: &FusedFn, args: &[Arg<'_>], dtype: DType, dev: &Device) {
    check_against_reference(what, f, args, dtype, dev)
}

fn random_ids(r: &mut TestRng, shape: &[usize], vocab: u32, dev: &Device) -> Tensor {
    let ids: Vec<u32> = (0..shape.iter().product::<usize>()).map(|_| (r.next_u64() % vocab as u64) as u32).collect();
    Tensor::from_vec(ids, shape, dev).expect("ids")
}

fn token_ids_round_trip_and_convert(dev: &Device) {
    let ids = Tensor::from_vec(vec![0u32, 7, 49151, 1 << 24], &[2, 2], dev).expect("ids");
    assert_eq!((ids.dtype(), ids.shape()), (DType::U32, &[2, 2][..]));
    assert_eq!(ids.to_vec::<u32>().expect("u32"), [0, 7, 49151, 1 << 24]);
    assert_eq!(ids.to_vec::<f32>().expect("as f32"), [0.0, 7.0, 49151.0, 16_777_216.0], "exact up to 2^24");
    assert!(format!("{ids:?}").ends_with("[0, 7, 49151, 16777216])"), "{ids:?}");
    let floats = Tensor::from_vec(vec![1.5f32, 2.0], &[2], dev).expect("floats");
    assert!(matches!(floats.to_vec::<u32>(), Err(Error::DType { expected: DType::U32, got: DType::F32, .. })));
    let err = floats.to_dtype(DType::U32).expect_err("floats are not ids");
    assert!(err.to_string().contains("f32 values do not convert to u32"), "{err}");
    if dev.is_cuda() {
        let err = ids.to_dtype(DType::F32).expect_err("no GPU kernel reads ids yet");
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    } else {
        assert_eq!(ids.to_dtype(DType::F32).expect("to f32").to_vec::<f32>().expect("f32")[2], 49151.0);
    }
}

fn arithmetic_on_ids_is_an_error_naming_the_op(dev: &Device) {
    let ids = Tensor::from_vec(vec![1u32, 2, 3], &[3], dev).expect("ids");
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3], dev).expect("x");
    for (result, op) in [((&ids + &x), "add"), ((&ids * 2.0f32), "mul"), (ids.exp(), "exp"), (ids.sum(-1), "sum")] {
        let err = result.expect_err("ids take no arithmetic");
        let text = err.to_string();
        assert!(text.contains(op) && text.contains("u32 values (token ids) take no arithmetic"), "{text}");
    }
    let err = ids.argmax(-1).expect_err("argmax of ids");
    assert!(err.to_string().contains("`x` must be a float (f32, f16, bf16), got u32"), "{err}");
}

fn embedding_matches_reference(dev: &Device) {
    let mut r = TestRng::new(41);
    for dtype in DTYPES {
        for (ids_shape, vocab, hidden) in
            [(vec![1], 1, 1), (vec![3, 5], 37, 17), (vec![2, 1, 7], 300, 64), (vec![], 5, 3)]
        {
            let ids = random_ids(&mut r, &ids_shape, vocab as u32, dev);
            let table = random(&mut r, &[vocab, hidden], dtype, -1.0, 1.0, dev);
            check(
                &format!("embedding {ids_shape:?} of [{vocab}, {hidden}]"),
                lookup_fused(),
                &[fuse::arg(&ids), fuse::arg(&table)],
                dtype,
                dev,
            );
        }
    }
    {
        // Rows are copied in the table's own dtype: exact.
        let table = random(&mut r, &[11, 9], DType::BF16, -1.0, 1.0, dev);
        let ids = Tensor::from_vec(vec![10u32, 0, 10], &[3], dev).expect("ids");
        let rows: Vec<half::bf16> = embedding(&ids, &table).expect("embedding").to_vec().expect("rows");
        let all: Vec<half::bf16> = table.to_vec().expect("table");
        assert_eq!(rows, [&all[90..99], &all[0..9], &all[90..99]].concat());
    }
}

fn an_id_outside_the_vocabulary_is_an_error(dev: &Device) {
    let table = Tensor::from_vec(vec![0.5f32; 12], &[4, 3], dev).expect("table");
    let ids = Tensor::from_vec(vec![1u32, 4, 0], &[3], dev).expect("ids");
    // On the GPU the kernel finds it, reported at the next synchronisation: tests/device_checks.rs (one
    // test at a time there, so that no other test's synchronisation takes the report).
    if !dev.is_cuda() {
        for err in [embedding(&ids, &table).expect_err("eager"), lookup(&ids, &table).expect_err("fused")] {
            assert!(err.to_string().contains("token id 4 is out of range for a vocabulary of 4"), "{err}");
        }
    }
    let floats = Tensor::from_vec(vec![1.0f32], &[1], dev).expect("float ids");
    assert!(embedding(&floats, &table).expect_err("float ids").to_string().contains("`ids` must be u32, got f32"));
}

fn argmax_matches_reference_and_keeps_the_axis(dev: &Device) {
    let mut r = TestRng::new(42);
    for dtype in DTYPES {
        // Rows of 4104 (16-byte aligned) and one of 4099 or 49,152 (a decoder's logits) take the GPU's vector
        // loads, with and without a tail; rows of 17 or 33 the element loop.
        for shape in [vec![1, 1], vec![3, 17], vec![2, 5, 33], vec![7], vec![3, 4104], vec![1, 4099], vec![1, 49152]] {
            let x = random(&mut r, &shape, dtype, -3.0, 3.0, dev);
            let args = [fuse::arg(&x)];
            check(&format!("argmax {shape:?}"), pick_fused(), &args, DType::U32, dev);
            {
                let got = pick(&x).expect("argmax");
                let mut kept = shape.clone();
                *kept.last_mut().expect("an axis") = 1;
                assert_eq!((got.shape(), got.dtype()), (&kept[..], DType::U32));
                assert_eq!(got.to_vec::<u32>().unwrap(), x.argmax(-1).unwrap().to_vec::<u32>().unwrap(), "eager");
            }
        }
    }
    {
        let x = Tensor::from_vec(vec![1.0f32, 3.0, 3.0, -1.0, f32::NAN, 5.0], &[2, 3], dev).expect("x");
        assert_eq!(x.argmax(-1).unwrap().to_vec::<u32>().unwrap(), [1, 1], "ties: the first; NaN: the largest");
        assert_eq!(x.argmax(1).unwrap().to_vec::<u32>().unwrap(), [1, 1], "the last axis by index");
    }
    let x = Tensor::from_vec(vec![1.0f32; 6], &[2, 3], dev).expect("x");
    assert!(matches!(x.argmax(0), Err(Error::Unsupported { op: "argmax", .. })));
}

fn rope_matches_reference(dev: &Device) {
    let mut r = TestRng::new(43);
    for dtype in DTYPES {
        for shape in [vec![1, 2], vec![3, 8], vec![2, 3, 5, 64], vec![9, 17, 8]] {
            let (seq, d) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let x = random(&mut r, &shape, dtype, -2.0, 2.0, dev);
            let cos = random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, dev);
            let sin = random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, dev);
            let args = [fuse::arg(&x), fuse::arg(&cos), fuse::arg(&sin)];
            check(&format!("rope {shape:?}"), rotate_fused(), &args, dtype, dev);
        }
    }
    let x = Tensor::from_vec(vec![1.0f32; 10], &[2, 5], dev).expect("x");
    let cs = Tensor::from_vec(vec![1.0f32; 4], &[2, 2], dev).expect("cos");
    let err = rope(&x, &cs, &cs).expect_err("odd d");
    assert!(err.to_string().contains("rope `rope(x, cos, sin)`: takes x [b, .., seq, d] with d even"), "{err}");
}

/// Grouped heads of 3, 1, 1 and 4 query heads a kv head: at one query the GPU's decode kernel runs 3, 1, 1 and
/// 2 row groups side by side (fuse-ir's `attention_launch`).
fn attention_matches_reference(dev: &Device) {
    let mut r = TestRng::new(44);
    for dtype in DTYPES {
        for (q_heads, kv_heads) in [(3, 1), (9, 3), (2, 2), (4, 1)] {
            for d in [8, 64] {
                for queries in [1, 3, 17] {
                    for keys in [1, 5, 33] {
                        let batch = if queries == 3 { 2 } else { 1 };
                        let q = random(&mut r, &[batch, q_heads, queries, d], dtype, -1.0, 1.0, dev);
                        let k = random(&mut r, &[batch, kv_heads, keys, d], dtype, -1.0, 1.0, dev);
                        let v = random(&mut r, &[batch, kv_heads, keys, d], dtype, -1.0, 1.0, dev);
                        let scale = 1.0 / (d as f32).sqrt() * 2.0;
                        let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&scale)];
                        let what = format!("attention hq {q_heads} hkv {kv_heads} d {d} sq {queries} skv {keys}");
                        check(&what, attend_fused(), &args, dtype, dev);
                        if queries <= keys {
                            check(&format!("causal {what}"), attend_causal_fused(), &args, dtype, dev);
                        }
                    }
                }
            }
        }
    }
}

/// One query against many cached keys: the GPU splits the keys across blocks (from 128 keys on, at least 64
/// a split; fuse-ir's `attention_launch`) and the last block of each kv head merges the splits.
fn attention_decode_over_a_cache_matches_reference(dev: &Device) {
    let mut r = TestRng::new(46);
    let (batch, q_heads, kv_heads) = (2, 9, 3);
    for dtype in [DType::F32, DType::BF16] {
        for (d, capacity, used_keys) in [
            (64, 4100, &[1usize, 17, 1000, 4095][..]),
            (1, 1003, &[1000]),
            (3, 1003, &[1000]),
            (128, 1003, &[1000]),
            (256, 1003, &[1000]),
        ] {
            let [k_cache, v_cache] =
                [0; 2].map(|_| random(&mut r, &[batch, kv_heads, capacity, d], dtype, -1.0, 1.0, dev));
            for &used in used_keys {
                let q = random(&mut r, &[batch, 1, q_heads, d], dtype, -1.0, 1.0, dev);
                let scale = 2.0 / (d as f32).sqrt();
                let args =
                    [fuse::arg(&q), fuse::arg(&k_cache), fuse::arg(&v_cache), fuse::arg(&used), fuse::arg(&scale)];
                let what = format!("decode attention d {d} over {used} of {capacity} cached keys");
                check(&what, attend_cache_fused(), &args, dtype, dev);
                check(&format!("causal {what}"), attend_cache_causal_fused(), &args, dtype, dev);
                if used == 4095 {
                    // The splits merge in a fixed order (the atomics only count arrivals), so a repeated call is
                    // bit-identical.
                    let [first, again] = [0; 2].map(|_| {
                        attend_cache_causal_fused().call(&args).expect("decode")[0].to_vec::<f32>().expect("read")
                    });
                    assert!(
                        first.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{what}: two calls differ"
                    );
                }
            }
        }
    }
}

/// Many queries: on the GPU, tiles of 16 (query, head) rows share each key/value tile; causal tiles skip the
/// keys past their last query's; 300 queries make many tiles (and key splits where there are few of them).
fn attention_prefill_matches_reference(dev: &Device) {
    let mut r = TestRng::new(47);
    for dtype in [DType::F32, DType::BF16] {
        for (q_heads, kv_heads) in [(3, 3), (9, 3)] {
            for (seq, dims) in [(17, &[1, 3, 64, 128, 256][..]), (300, &[64])] {
                for &d in dims {
                    let batch = if seq == 17 { 2 } else { 1 };
                    let q = random(&mut r, &[batch, q_heads, seq, d], dtype, -1.0, 1.0, dev);
                    let [k, v] = [0; 2].map(|_| random(&mut r, &[batch, kv_heads, seq, d], dtype, -1.0, 1.0, dev));
                    let scale = 2.0 / (d as f32).sqrt();
                    let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&scale)];
                    let what = format!("prefill attention b {batch} hq {q_heads} hkv {kv_heads} seq {seq} d {d}");
                    check(&what, attend_fused(), &args, dtype, dev);
                    check(&format!("causal {what}"), attend_causal_fused(), &args, dtype, dev);
                }
            }
        }
    }
}

/// The decode kernel's splits at their edges: batch 16 over 8192 keys (3 splits a kv head on 132
/// multiprocessors), and attention_len over a capacity of 4096 (15 splits for 3 batches) whose counts leave
/// most splits of a batch empty (0 keys: all of them; 100: all but 2; 65: all but one and a key), each call
/// repeated: the arrival counters are back at zero after every launch, so the second call merges the same way
/// and gives the same bits (a counter left behind would have the wrong block merge, or none).
fn attention_decode_splits_merge_in_one_launch(dev: &Device) {
    let mut r = TestRng::new(50);
    let (q_heads, kv_heads, d) = (9, 3, 64);
    let scale = 2.0 / (d as f32).sqrt();
    let same_bits = |what: &str, f: &FusedFn, args: &[Arg<'_>]| {
        let [first, again] = [0; 2].map(|_| f.call(args).expect("decode")[0].to_vec::<f32>().expect("read"));
        assert!(first.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: two calls differ");
    };
    {
        let (batch, keys) = (16, 8192);
        let [k, v] = [0; 2].map(|_| random(&mut r, &[batch, kv_heads, keys, d], DType::BF16, -1.0, 1.0, dev));
        let q = random(&mut r, &[batch, 1, q_heads, d], DType::BF16, -1.0, 1.0, dev);
        let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&keys), fuse::arg(&scale)];
        let what = "decode attention batch 16 over 8192 keys";
        check(what, attend_cache_causal_fused(), &args, DType::BF16, dev);
        same_bits(what, attend_cache_causal_fused(), &args);
    }
    let capacity = 4096;
    for dtype in [DType::F32, DType::BF16] {
        for counts in [[0, 100, 4096], [1, 65, 3001]] {
            let [k, v] = [0; 2].map(|_| cache_with_nan_tail(&mut r, kv_heads, capacity, d, &counts, dtype, dev));
            let lens = key_counts(&counts, dev);
            let q = random(&mut r, &[3, q_heads, 1, d], dtype, -1.0, 1.0, dev);
            let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&lens), fuse::arg(&scale)];
            let what = format!("decode attention_len over {counts:?} of {capacity} keys {dtype}");
            check(&what, attend_len_fused(), &args, dtype, dev);
            same_bits(&what, attend_len_fused(), &args);
            if counts[0] > 0 {
                check(&format!("causal {what}"), attend_len_causal_fused(), &args, dtype, dev);
                same_bits(&what, attend_len_causal_fused(), &args);
            }
        }
    }
}

/// `decode_step_attention` at one new position, fused and unfused, against the reference: the output and both
/// caches after the call. Its plan is one rope_append_attention group, which on the GPU is one launch of the
/// decode kernel (rope, both appends and attention: fuse-runtime's `cuda/exec/rope_append.rs`). The caches hold NaN at the new position before the call, so a kernel that
/// reads the cache there before it is written shows it. Shapes: SmolLM2's heads with 1 and 2 splits in use,
/// batch 3 over 2 splits, one query head a kv head at d = 128, the last position of the cache, and prefill (2
/// positions: not fused, the same answer).
fn decode_step_rope_appends_and_attention(dev: &Device) {
    let mut r = TestRng::new(51);
    let cases = [
        (1, 9, 3, 64, 300, 100, 1),
        (1, 9, 3, 64, 300, 200, 1),
        (3, 4, 2, 32, 301, 250, 1),
        (2, 8, 8, 128, 17, 16, 1),
        (2, 9, 3, 64, 40, 20, 2),
    ];
    for dtype in DTYPES {
        for (batch, hq, hkv, d, capacity, at, seq) in cases {
            let hqk = hq + hkv;
            let qkv = random(&mut r, &[batch, seq, hqk + hkv, d], dtype, -1.0, 1.0, dev);
            let [cos, sin] = [0; 2].map(|_| random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, dev));
            // A cache of `data` with NaN at the new positions.
            let cache_nan_at_new = |mut data: Vec<f32>| {
                data.iter_mut()
                    .enumerate()
                    .filter(|(i, _)| (at..at + seq).contains(&(i / d % capacity)))
                    .for_each(|(_, x)| *x = f32::NAN);
                Tensor::from_vec(data, &[batch, hkv, capacity, d], &Device::Cpu)
                    .and_then(|t| t.to_dtype(dtype))
                    .and_then(|t| t.to_device(dev))
                    .expect("cache")
            };
            let [k_cache, v_cache] = [0; 2]
                .map(|_| cache_nan_at_new((0..batch * hkv * capacity * d).map(|_| r.uniform(-1.0, 1.0)).collect()));
            let position = Tensor::from_vec(vec![at as u32], &[1], dev).expect("at");
            let lens = key_counts(&vec![at + seq; batch], dev);
            let scale = 1.0 / (d as f32).sqrt();
            let args = [&qkv, &cos, &sin, &k_cache, &v_cache, &position, &lens].map(fuse::arg);
            let args = [&args[..], &[fuse::arg(&hq), fuse::arg(&hkv), fuse::arg(&hqk), fuse::arg(&scale)]].concat();
            let what = format!(
                "decode step attention b {batch} heads {hq}/{hkv} d {d} at {at} of {capacity}, {seq} new, {dtype}"
            );
            check(&what, decode_step_attention_fused(), &args, dtype, dev);
            // Recorded, the step is one kernel (the decode kernel with rope and the appends in it); a prefill
            // is rope, the appends' copy kernel and attention.
            let graph =
                CudaGraph::capture(dev, || decode_step_attention_fused().call(&args).map(drop)).expect("capture");
            if let Some(kernels) = graph.kernel_count().expect("kernel count") {
                assert!(if seq == 1 { kernels == 1 } else { kernels >= 3 }, "{what}: {kernels} kernels");
            }
            // After a kernel of the same call (the decoder's projection): the decode kernel loads the caches
            // before it waits for that kernel. The caches were written above: the same positions are NaN again.
            let qkv_scale = random(&mut r, &[d], dtype, 0.5, 1.5, dev);
            let [k_cache, v_cache] = [&k_cache, &v_cache].map(|c| cache_nan_at_new(c.to_vec::<f32>().expect("cache")));
            let after = [&qkv, &qkv_scale, &cos, &sin, &k_cache, &v_cache, &position, &lens].map(fuse::arg);
            let after = [&after[..], &[fuse::arg(&hq), fuse::arg(&hkv), fuse::arg(&hqk), fuse::arg(&scale)]].concat();
            check(&format!("{what}, after a kernel"), decode_step_after_kernel_fused(), &after, dtype, dev);
        }
    }
}

/// The planner makes a decode step's rope, cache appends and attention one rope_append_attention group, which
/// `explain` prints and each device runs (the GPU in one launch where the shapes allow it, the CPU member by
/// member); one new position and a prefill of three give the reference interpreter's result.
fn decode_block_is_one_planned_group(dev: &Device) {
    let kinds =
        |f: &FusedFn| -> Vec<&str> { f.plan(Fusion::On).unwrap().groups.iter().map(|g| g.kind.name()).collect() };
    assert_eq!(kinds(decode_step_attention_fused()), ["rope_append_attention"]);
    assert_eq!(kinds(decode_step_after_kernel_fused()), ["pointwise", "rope_append_attention"]);
    let mut r = TestRng::new(52);
    let (batch, hq, hkv, d, capacity) = (2, 4, 2, 16, 11);
    for (at, seq) in [(5, 1), (4, 3)] {
        let hqk = hq + hkv;
        let qkv = random(&mut r, &[batch, seq, hqk + hkv, d], DType::F32, -1.0, 1.0, dev);
        let [cos, sin] = [0; 2].map(|_| random(&mut r, &[seq, d / 2], DType::F32, -1.0, 1.0, dev));
        let [k_cache, v_cache] = [0; 2].map(|_| random(&mut r, &[batch, hkv, capacity, d], DType::F32, -1.0, 1.0, dev));
        let position = Tensor::from_vec(vec![at as u32], &[1], dev).expect("at");
        let lens = key_counts(&vec![at + seq; batch], dev);
        let scale = 0.25f32;
        let args = [&qkv, &cos, &sin, &k_cache, &v_cache, &position, &lens].map(fuse::arg);
        let args = [&args[..], &[fuse::arg(&hq), fuse::arg(&hkv), fuse::arg(&hqk), fuse::arg(&scale)]].concat();
        let explained = decode_step_attention_fused().explain(&args).expect("explain");
        assert!(explained.starts_with("k0 rope_append_attention "), "{explained}");
        // One launch on the GPU; four passes on the CPU, which says so.
        let (total, members) = if dev.is_cuda() { ("total: 1 kernels", false) } else { ("total: 4 passes", true) };
        assert!(explained.contains(total), "{explained}");
        assert_eq!(explained.contains("runs its 4 members one by one"), members, "{explained}");
        check(&format!("decode block, {seq} new at {at}"), decode_step_attention_fused(), &args, DType::F32, dev);
    }
}

fn attention_beside_pointwise_work_matches_reference(dev: &Device) {
    let mut r = TestRng::new(45);
    for dtype in DTYPES {
        let (seq, d) = (17, 8);
        let q = random(&mut r, &[2, 9, seq, d], dtype, -1.0, 1.0, dev);
        let k = random(&mut r, &[2, 3, seq, d], dtype, -1.0, 1.0, dev);
        let v = random(&mut r, &[2, 3, seq, d], dtype, -1.0, 1.0, dev);
        let cos = random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, dev);
        let sin = random(&mut r, &[seq, d / 2], dtype, -1.0, 1.0, dev);
        let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&cos), fuse::arg(&sin), fuse::arg(&v)];
        check("rope, attention and pointwise", rotate_and_attend_fused(), &args, dtype, dev);
        {
            let explained = rotate_and_attend_fused().explain(&args).expect("explain");
            assert!(explained.contains("model_attention"), "{explained}");
            let eager = (silu(
                &attention(
                    &rope(&(&q * 2.0f32).unwrap(), &cos, &sin).unwrap(),
                    &rope(&k, &cos, &sin).unwrap(),
                    &v,
                    0.125,
                    true,
                )
                .unwrap(),
            )
            .unwrap()
                + 1.0f32)
                .unwrap();
            let fused = rotate_and_attend(&q, &k, &cos, &sin, &v).expect("fused");
            fuse::testing::assert_close("eager against fused", &eager, &fused, dtype, dev);
        }
    }
    let kinds: Vec<&str> =
        rotate_and_attend_fused().plan(Fusion::On).unwrap().groups.iter().map(|g| g.kind.name()).collect();
    assert_eq!(
        kinds,
        ["pointwise", "model", "model", "model", "pointwise"],
        "q * 2; rope(q); rope(k); attention; silu(..) + 1"
    );
}

fn attention_shapes_that_do_not_fit_are_errors(dev: &Device) {
    let t = |shape: &[usize]| Tensor::from_vec(vec![0.5f32; shape.iter().product()], shape, dev).expect("tensor");
    let (q, k) = (t(&[1, 4, 2, 8]), t(&[1, 3, 5, 8]));
    let err = attention(&q, &k, &k, 1.0, false).expect_err("4 query heads over 3 kv heads");
    assert!(err.to_string().contains("hq a multiple of hkv") && err.to_string().contains("[1, 4, 2, 8]"), "{err}");
    let err =
        attention(&t(&[1, 1, 6, 8]), &t(&[1, 1, 5, 8]), &t(&[1, 1, 5, 8]), 1.0, true).expect_err("causal, sq > skv");
    assert!(err.to_string().contains("no more queries than keys"), "{err}");
    let err = attention(&q, &t(&[1, 2, 5, 8]), &t(&[1, 2, 5, 8]).to_dtype(DType::BF16).unwrap(), 1.0, false)
        .expect_err("dtypes");
    assert!(err.to_string().contains("dtypes f32 and bf16 differ"), "{err}");
}

/// A cache [b, kv_heads, capacity, d] in `dtype` on `dev`, random up to each batch's count and NaN from there
/// on: a kernel that reads a key past its count shows it in its output.
fn cache_with_nan_tail(
    r: &mut TestRng,
    kv_heads: usize,
    capacity: usize,
    d: usize,
    counts: &[usize],
    dtype: DType,
    dev: &Device,
) -> Tensor {
    let shape = [counts.len(), kv_heads, capacity, d];
    let data: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|i| if i / d % capacity < counts[i / (kv_heads * capacity * d)] { r.uniform(-1.0, 1.0) } else { f32::NAN })
        .collect();
    Tensor::from_vec(data, &shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .and_then(|t| t.to_device(dev))
        .expect("cache")
}

fn key_counts(counts: &[usize], dev: &Device) -> Tensor {
    Tensor::from_vec(counts.iter().map(|&c| c as u32).collect::<Vec<u32>>(), &[counts.len()], dev).expect("lens")
}

/// Decode (one query) and a short causal prefill (4 queries) over caches of 33 and 300 positions (on the GPU
/// 2 and 10 key splits, computed from the capacity, so that splits past a count see no key), each batch with
/// its own count; the positions past it are NaN, and the reference skips them too.
fn attention_len_reads_only_the_counted_keys(dev: &Device) {
    let mut r = TestRng::new(48);
    let (q_heads, kv_heads, d) = (9, 3, 64);
    let scale = 2.0 / (d as f32).sqrt();
    for dtype in [DType::F32, DType::BF16] {
        for (capacity, counts) in [(33, [1, 17]), (33, [0, 33]), (33, [4, 33]), (300, [299, 5])] {
            let [k, v] = [0; 2].map(|_| cache_with_nan_tail(&mut r, kv_heads, capacity, d, &counts, dtype, dev));
            let lens = key_counts(&counts, dev);
            for queries in [1, 4] {
                let q = random(&mut r, &[2, q_heads, queries, d], dtype, -1.0, 1.0, dev);
                let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&lens), fuse::arg(&scale)];
                let what = format!("attention_len sq {queries} over {counts:?} of {capacity} keys");
                check(&what, attend_len_fused(), &args, dtype, dev);
                // Causal needs the queries among the counted keys (the last sq of them).
                let causal = counts.iter().all(|&c| c >= queries);
                if causal {
                    check(&format!("causal {what}"), attend_len_causal_fused(), &args, dtype, dev);
                }
                {
                    let eager = attention_len(&q, &k, &v, &lens, scale, causal).expect("eager");
                    let fused = if causal {
                        attend_len_causal(&q, &k, &v, &lens, scale)
                    } else {
                        attend_len(&q, &k, &v, &lens, scale)
                    };
                    fuse::testing::assert_close(&format!("eager {what}"), &eager, &fused.expect("fused"), dtype, dev);
                }
            }
        }
    }
    {
        // lens as a strided view (every other element of a longer tensor): read through its stride.
        let counts = [17, 2];
        let [k, v] = [0; 2].map(|_| cache_with_nan_tail(&mut r, kv_heads, 33, d, &counts, DType::F32, dev));
        let pairs = Tensor::from_vec(vec![17u32, 999, 2, 999], &[2, 2], dev).expect("pairs");
        let strided = pairs.narrow(1, 0, 1).and_then(|t| t.reshape(&[2])).expect("a view of column 0");
        let q = random(&mut r, &[2, q_heads, 1, d], DType::F32, -1.0, 1.0, dev);
        let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&v), fuse::arg(&strided), fuse::arg(&scale)];
        check("attention_len with strided lens", attend_len_causal_fused(), &args, DType::F32, dev);
    }
}

/// Counts that do not fit: on the CPU an error naming the count, the same eager and fused (the GPU's report:
/// tests/device_checks.rs). A lens of the wrong dtype or shape is an error on each device.
fn attention_len_counts_that_do_not_fit(dev: &Device) {
    let mut r = TestRng::new(49);
    let (capacity, d) = (33, 64);
    let q = random(&mut r, &[2, 9, 4, d], DType::F32, -1.0, 1.0, dev);
    let [k, v] = [0; 2].map(|_| cache_with_nan_tail(&mut r, 3, capacity, d, &[33, 2], DType::F32, dev));
    let run = |lens: &Tensor, causal: bool| {
        let eager = attention_len(&q, &k, &v, lens, 0.125, causal);
        let fused =
            if causal { attend_len_causal(&q, &k, &v, lens, 0.125) } else { attend_len(&q, &k, &v, lens, 0.125) };
        [eager, fused]
    };
    // On the GPU the kernels find them, reported at the next synchronisation: tests/device_checks.rs (one test
    // at a time there, so that no other test's synchronisation takes the report).
    if !dev.is_cuda() {
        let cases = [
            (false, [33, 34], "key count lens[1] = 34 is outside 0..=33 (at most the 33 keys k and v hold)"),
            (
                true,
                [33, 2],
                "key count lens[1] = 2 is outside 4..=33 (under causal at least the 4 queries, at most the 33 keys",
            ),
        ];
        for (causal, counts, says) in cases {
            for result in run(&key_counts(&counts, dev), causal) {
                let err = result.expect_err("a count out of range");
                assert!(err.to_string().contains(says), "{err}");
            }
        }
    }
    let floats = Tensor::from_vec(vec![3.0f32, 3.0], &[2], dev).expect("float lens");
    for result in run(&floats, false) {
        let err = result.expect_err("f32 lens");
        assert!(err.to_string().contains("`lens` must be u32, got f32"), "{err}");
    }
    for result in run(&key_counts(&[3, 3, 3], dev), false) {
        let err = result.expect_err("3 counts for 2 batches");
        assert!(
            err.to_string().contains("lens [b]: one key count for each batch") && err.to_string().contains("[3]"),
            "{err}"
        );
    }
}

fuse::device_tests!(
    token_ids_round_trip_and_convert,
    arithmetic_on_ids_is_an_error_naming_the_op,
    embedding_matches_reference,
    an_id_outside_the_vocabulary_is_an_error,
    argmax_matches_reference_and_keeps_the_axis,
    rope_matches_reference,
    attention_matches_reference,
    attention_decode_over_a_cache_matches_reference,
    attention_prefill_matches_reference,
    attention_decode_splits_merge_in_one_launch,
    decode_step_rope_appends_and_attention,
    decode_block_is_one_planned_group,
    attention_beside_pointwise_work_matches_reference,
    attention_shapes_that_do_not_fit_are_errors,
    attention_len_reads_only_the_counted_keys,
    attention_len_counts_that_do_not_fit,
);
