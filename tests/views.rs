//! View and layout ops (`reshape`, `transpose`, `permute`, `narrow`, `cat`, `contiguous`, `dim`, `slice_set`) and matmul
//! with batch axes on both sides: traced by `#[fuse]`, fused and unfused, and as eager ops, against the
//! reference interpreter on random inputs with odd shapes, on each device (`fuse::device_tests!`); and the
//! errors for bad axes, sizes and shapes. On the GPU, batch axes that do not merge into one strided axis are
//! `Error::Unsupported` (see README); their case says so.

use fuse::prelude::*;
use fuse::testing::{assert_close, check_against_reference as check, random, TestRng};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// `[b, s, h*d]` -> heads `[b, h, s, d]`, scores against the keys, softmax: the attention layout of a
/// decoder, made of views feeding matmuls.
#[fuse]
fn head_scores(q: &Tensor, k: &Tensor, heads: usize, d: usize) -> Result<Tensor> {
    let qh = q.reshape(&[q.dim(0), q.dim(1), heads, d]).transpose(1, 2);
    let kh = k.reshape(&[k.dim(0), k.dim(1), heads, d]).permute(&[0, 2, 3, 1]);
    softmax(qh.matmul(&kh) * 0.125)
}

/// Pointwise and row groups reading views with offsets and non-dense strides.
#[fuse]
fn views_in_groups(x: &Tensor, y: &Tensor, start: usize, len: usize) -> Result<Tensor> {
    let window = x.narrow(-1, start, len).transpose(0, 1);
    let rows = exp(window) + y;
    Ok(rms_norm(&rows, &y.narrow(0, 0, 1).reshape(&[-1]), 1e-5))
}

/// A reshape that merges a transposed pair of axes: a copy on the CPU, then rows of it.
#[fuse]
fn reshape_of_transposed(x: &Tensor) -> Result<Tensor> {
    Ok(tanh(x.transpose(0, 1).reshape(&[-1])).contiguous())
}

/// ViT's patch embedding input: [b, c, h, w] cut into p x p patches, [b, patches, c * p * p]; the reshape of
/// the permuted six axes needs a copy on every device (issue 32 point 10), the sizes come from arithmetic.
#[fuse]
fn patchify(x: &Tensor, p: usize) -> Result<Tensor> {
    let (b, c, h, w) = (x.dim(0), x.dim(1), x.dim(2) / p, x.dim(3) / p);
    let tiles = x.reshape(&[b, c, h, p, w, p]).permute(&[0, 2, 4, 1, 3, 5]);
    Ok(tiles.reshape(&[b, h * w, c * p * p]) * 2.0)
}

#[fuse]
fn joined(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let c = cat(&[&exp(a), b, &a.contiguous()], 1);
    Ok(-c)
}

/// Copies that launch together (a cat's parts) and one that must wait for them: the second cat reads the
/// first's result, and the third reads neither.
#[fuse]
fn chained_cats(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let c = cat(&[a, b], 1);
    let d = cat(&[&c.narrow(1, 1, 1), a, &c.narrow(1, 0, 1)], 1);
    let e = cat(&[b, a], 1);
    Ok(cat(&[&d, &e], 1))
}

#[fuse]
fn batched(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(a.matmul(b))
}

/// A decoder's cache step: new rows (a transposed view) written into the cache in place, then read back
/// through a narrow view by a row reduction.
#[fuse]
fn cache_step(cache: &Tensor, rows: &Tensor, pos: usize, len: usize) -> Result<Tensor> {
    let cache = cache.slice_set(&rows.transpose(1, 2), 2, pos);
    Ok(softmax(cache.narrow(2, 0, len) * 2.0))
}

/// `want` with rows `pos ..` of axis 2 of a [b, h, cap, d] cache replaced by `rows` [b, s, h, d].
fn cache_with_rows(want: &mut [f32], rows: &[f32], [b, h, cap, d]: [usize; 4], s: usize, pos: usize) {
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let (to, from) = (((bi * h + hi) * cap + pos + si) * d, ((bi * s + si) * h + hi) * d);
                want[to..to + d].copy_from_slice(&rows[from..from + d]);
            }
        }
    }
}

fn slice_set_writes_in_place(dev: &Device) {
    let mut r = TestRng::new(39);
    for dtype in DTYPES {
        for (b, h, cap, d, pos, s) in [(1, 1, 1, 1, 0usize, 1usize), (1, 3, 17, 5, 16, 1), (2, 3, 33, 17, 4, 29)] {
            let cache = random(&mut r, &[b, h, cap, d], dtype, -1.0, 1.0, dev);
            let rows = random(&mut r, &[b, s, h, d], dtype, -1.0, 1.0, dev);
            let mut want = cache.to_vec::<f32>().unwrap();
            cache_with_rows(&mut want, &rows.to_vec::<f32>().unwrap(), [b, h, cap, d], s, pos);
            let what = format!("cache_step [{b}, {h}, {cap}, {d}] rows {pos}+{s} {dtype}");
            let len = pos + s;
            let args = [fuse::arg(&cache), fuse::arg(&rows), fuse::arg(&pos), fuse::arg(&len)];
            // The reference computes values only; the fused runs (fused and unfused) also write the cache.
            check(&what, cache_step_fused(), &args, dtype, dev);
            assert_eq!(cache.to_vec::<f32>().unwrap(), want, "{what}: the caller's cache after the write");
            // Eager, into a destination that is itself a view (a narrow of a wider tensor, with an offset).
            let wide = random(&mut r, &[b, h + 2, cap, d], dtype, -1.0, 1.0, dev);
            let mut want = wide.to_vec::<f32>().unwrap();
            let src = rows.transpose(1, 2).unwrap();
            let written = wide.narrow(1, 2, h).unwrap().slice_set(&src, 2, pos).unwrap();
            assert_eq!(written.shape(), &[b, h, cap, d], "{what}: slice_set returns the destination");
            for bi in 0..b {
                let mut plane: Vec<f32> = Vec::new();
                for hi in 0..h {
                    let at = ((bi * (h + 2) + 2 + hi) * cap) * d;
                    plane.extend_from_slice(&want[at..at + cap * d]);
                }
                let single = rows.narrow(0, bi, 1).unwrap().to_vec::<f32>().unwrap();
                cache_with_rows(&mut plane, &single, [1, h, cap, d], s, pos);
                for hi in 0..h {
                    let at = ((bi * (h + 2) + 2 + hi) * cap) * d;
                    want[at..at + cap * d].copy_from_slice(&plane[hi * cap * d..(hi + 1) * cap * d]);
                }
            }
            assert_eq!(wide.to_vec::<f32>().unwrap(), want, "{what}: eager slice_set into a narrow view");
        }
    }
}

/// A position held in a u32 tensor (a step whose position lives on the device) writes where a `usize` does.
fn slice_set_at_a_position_held_in_a_tensor(dev: &Device) {
    let mut r = TestRng::new(44);
    for dtype in DTYPES {
        let (a, b) =
            (random(&mut r, &[2, 7, 3], dtype, -1.0, 1.0, dev), random(&mut r, &[2, 7, 3], dtype, -1.0, 1.0, dev));
        b.slice_set(&a, 0, 0).unwrap(); // b = a, in place
        let rows = random(&mut r, &[2, 3, 3], dtype, -1.0, 1.0, dev);
        let at = Tensor::from_vec(vec![4u32], &[1], dev).unwrap();
        a.slice_set(&rows, 1, 4).unwrap();
        b.slice_set(&rows, 1, &at).unwrap();
        assert_eq!(
            a.to_vec::<f32>().unwrap(),
            b.to_vec::<f32>().unwrap(),
            "{dtype}: offset 4 given as usize and as a tensor"
        );
    }
    // Past the end: the CPU refuses the call (the GPU's kernel check: tests/device_checks.rs).
    let cache = random(&mut r, &[1, 5, 2], DType::F32, -1.0, 1.0, dev);
    let rows = random(&mut r, &[1, 2, 2], DType::F32, -1.0, 1.0, dev);
    if !dev.is_cuda() {
        let before = cache.to_vec::<f32>().unwrap();
        let at = Tensor::from_vec(vec![4u32], &[1], dev).unwrap();
        let err = cache.slice_set(&rows, 1, &at).expect_err("offset 4 + 2 rows of 5");
        assert!(err.to_string().contains("offset 4"), "{err}");
        assert_eq!(cache.to_vec::<f32>().unwrap(), before, "nothing written");
    }
    let floats = Tensor::from_vec(vec![1.0f32], &[1], dev).unwrap();
    assert!(cache.slice_set(&rows, 1, &floats).is_err(), "a float position is refused");
}

fn slice_set_errors_are_clear(dev: &Device) {
    let cache = random(&mut TestRng::new(40), &[2, 5, 3], DType::F32, -1.0, 1.0, dev);
    let rows = random(&mut TestRng::new(41), &[2, 2, 3], DType::F32, -1.0, 1.0, dev);
    let before = cache.to_vec::<f32>().unwrap();
    let shape_error = |r: Result<Tensor>| match r {
        Err(e @ Error::Shape { .. }) => e.to_string(),
        other => panic!("expected a shape error, got {other:?}"),
    };
    let past = shape_error(cache.slice_set(&rows, 1, 4));
    assert!(past.contains("slice_set: offset 4 + 2 rows is past the end of axis 1 (size 5)"), "{past}");
    let wrong = shape_error(cache.slice_set(&rows.narrow(2, 0, 2).unwrap(), 1, 0));
    assert!(wrong.contains("differ on another axis"), "{wrong}");
    match cache.slice_set(&rows.to_dtype(DType::BF16).unwrap(), 1, 0) {
        Err(Error::Shape { error: fuse::ir::infer::InferError::DType { .. }, .. }) => {}
        other => panic!("a bf16 source into an f32 cache: expected a dtype error, got {other:?}"),
    }
    assert_eq!(cache.to_vec::<f32>().unwrap(), before, "a refused write leaves the destination as it was");
    // The cache and a view of it as two arguments: the view's reader could run before or after the write.
    let cache = random(&mut TestRng::new(42), &[1, 2, 5, 3], DType::F32, -1.0, 1.0, dev);
    let rows = random(&mut TestRng::new(43), &[1, 1, 2, 3], DType::F32, -1.0, 1.0, dev);
    let view = cache.narrow(2, 0, 1).unwrap().transpose(1, 2).unwrap();
    let (one, two) = (1usize, 2usize);
    let args = [fuse::arg(&cache), fuse::arg(&rows), fuse::arg(&one), fuse::arg(&two)];
    assert!(cache_step_fused().call(&args).is_ok(), "the write on its own is fine");
    let before = cache.to_vec::<f32>().unwrap();
    let aliased = [fuse::arg(&cache), fuse::arg(&view), fuse::arg(&one), fuse::arg(&two)];
    match cache_step_fused().call(&aliased) {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("shares its memory with the argument `rows`"), "{e}")
        }
        other => panic!("a destination aliased by another argument: expected Unsupported, got {other:?}"),
    }
    assert_eq!(cache.to_vec::<f32>().unwrap(), before, "a refused write leaves the destination as it was");
}

/// Whether `result` is the GPU's Unsupported for `op` (the case then stops); it runs or fails otherwise.
fn gpu_unsupported(dev: &Device, result: Result<Vec<Tensor>>, op: &str) -> bool {
    if !dev.is_cuda() {
        return false;
    }
    match result {
        Ok(_) => false,
        Err(Error::Unsupported { op: o, reason, .. }) if o == op || reason.contains("GPU") => true,
        Err(other) => panic!("{op} on the GPU: expected a result or Error::Unsupported, got {other:?}"),
    }
}

fn heads_match_reference(dev: &Device) {
    let mut r = TestRng::new(31);
    for dtype in DTYPES {
        for (b, s, heads, d) in [(1, 1, 1, 3), (1, 17, 3, 5), (3, 7, 2, 17)] {
            let q = random(&mut r, &[b, s, heads * d], dtype, -1.0, 1.0, dev);
            let k = random(&mut r, &[b, s, heads * d], dtype, -1.0, 1.0, dev);
            let args = [fuse::arg(&q), fuse::arg(&k), fuse::arg(&heads), fuse::arg(&d)];
            // Batch axes [b, h] of the transposed [b, s, h, d] merge only when b or s is 1 (README).
            if gpu_unsupported(dev, head_scores_fused().call(&args), "matmul") {
                assert!(
                    b > 1 && s > 1,
                    "head_scores b={b} s={s}: unsupported on the GPU although its batch axes merge"
                );
                continue;
            }
            check(&format!("head_scores b={b} s={s} h={heads} d={d}"), head_scores_fused(), &args, dtype, dev);
        }
    }
}

fn views_read_by_groups_match_reference(dev: &Device) {
    let mut r = TestRng::new(32);
    for dtype in DTYPES {
        for (rows, cols, start, len) in [(1, 3, 0usize, 1usize), (3, 17, 5, 3), (17, 33, 1, 31)] {
            let x = random(&mut r, &[rows, cols], dtype, -1.0, 1.0, dev);
            let y = random(&mut r, &[len, rows], dtype, 0.5, 1.5, dev);
            let args = [fuse::arg(&x), fuse::arg(&y), fuse::arg(&start), fuse::arg(&len)];
            check(
                &format!("views_in_groups [{rows}, {cols}] narrow {start}+{len}"),
                views_in_groups_fused(),
                &args,
                dtype,
                dev,
            );
        }
    }
}

fn reshape_needing_a_copy_matches_reference(dev: &Device) {
    let mut r = TestRng::new(33);
    for dtype in DTYPES {
        for shape in [[1, 1], [3, 17], [17, 5]] {
            let x = random(&mut r, &shape, dtype, -2.0, 2.0, dev);
            let args = [fuse::arg(&x)];
            check(&format!("reshape_of_transposed {shape:?}"), reshape_of_transposed_fused(), &args, dtype, dev);
        }
    }
}

fn patchify_matches_reference(dev: &Device) {
    let mut r = TestRng::new(35);
    for dtype in DTYPES {
        for (shape, p) in [([1, 3, 8, 8], 4usize), ([2, 2, 6, 9], 3)] {
            let x = random(&mut r, &shape, dtype, -2.0, 2.0, dev);
            check(&format!("patchify {shape:?} by {p}"), patchify_fused(), &[fuse::arg(&x), fuse::arg(&p)], dtype, dev);
        }
    }
}

fn cat_matches_reference(dev: &Device) {
    let mut r = TestRng::new(34);
    for dtype in DTYPES {
        for (rows, wa, wb) in [(1, 1, 1), (3, 17, 1), (17, 5, 33)] {
            let a = random(&mut r, &[rows, wa], dtype, -1.0, 1.0, dev);
            let b = random(&mut r, &[rows, wb], dtype, -1.0, 1.0, dev);
            let args = [fuse::arg(&a), fuse::arg(&b)];
            check(&format!("cat [{rows}, {wa}] [{rows}, {wb}]"), joined_fused(), &args, dtype, dev);
            check(&format!("chained cats [{rows}, {wa}] [{rows}, {wb}]"), chained_cats_fused(), &args, dtype, dev);
        }
    }
}

fn matmul_broadcasts_batch_axes(dev: &Device) {
    let mut r = TestRng::new(35);
    let cases: [(&[usize], &[usize]); 5] = [
        (&[2, 3, 5, 7], &[2, 3, 7, 1]),
        (&[3, 1, 17, 4], &[5, 4, 3]),
        (&[17, 3], &[2, 3, 5]),
        (&[1, 3, 4], &[3, 4, 5]),
        (&[2, 1, 1, 3], &[3, 1]),
    ];
    for dtype in DTYPES {
        for (sa, sb) in cases {
            let a = random(&mut r, sa, dtype, -1.0, 1.0, dev);
            let b = random(&mut r, sb, dtype, -1.0, 1.0, dev);
            let args = [fuse::arg(&a), fuse::arg(&b)];
            // On the GPU, batch axes that do not merge into one (a left operand broadcast across batches,
            // partly broadcast batch axes) are Unsupported (README); the others must run.
            let merges = sa.len() >= sb.len() && (sb.len() == 2 || sa[..sa.len() - 2] == sb[..sb.len() - 2]);
            if dev.is_cuda() && !merges {
                match batched_fused().call(&args) {
                    Err(Error::Unsupported { op: "matmul", .. }) => continue,
                    other => panic!("batched {sa:?} x {sb:?} on the GPU: expected Unsupported, got {other:?}"),
                }
            }
            check(&format!("batched {sa:?} x {sb:?}"), batched_fused(), &args, dtype, dev);
        }
    }
}

/// The eager ops give the same values as their `#[fuse]` twins, and views share storage.
fn eager_views_match(dev: &Device) {
    let mut r = TestRng::new(36);
    let x = random(&mut r, &[3, 4, 5], DType::F32, -1.0, 1.0, dev);
    let host: Vec<f32> = x.to_vec().unwrap();
    let at = |i: usize, j: usize, k: usize| host[(i * 4 + j) * 5 + k];
    let t = x.transpose(0, -1).unwrap();
    assert_eq!(t.shape(), &[5, 4, 3]);
    assert_eq!(t.to_vec::<f32>().unwrap()[1], at(1, 0, 0));
    let p = x.permute(&[1, 2, 0]).unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap()[1], at(1, 0, 0));
    let n = x.narrow(2, 1, 3).unwrap();
    assert_eq!(n.shape(), &[3, 4, 3]);
    assert_eq!(n.to_vec::<f32>().unwrap()[0], at(0, 0, 1));
    let flat = x.reshape(&[12, 5]).unwrap();
    assert_eq!(flat.to_vec::<f32>().unwrap(), host);
    assert_eq!(x.dim(-1).unwrap(), 5);
    let c = t.contiguous().unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    let joined = cat(&[&x, &x.narrow(0, 0, 1).unwrap()], 0).unwrap();
    assert_eq!(joined.shape(), &[4, 4, 5]);
    assert_eq!(joined.to_vec::<f32>().unwrap()[60..80], host[..20]);
    if !dev.is_cuda() {
        assert!(!t.is_contiguous() && c.is_contiguous());
        let merged = t.reshape(&[20, 3]).unwrap();
        assert_eq!(merged.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    }
    let a = random(&mut r, &[2, 3, 5, 7], DType::F32, -1.0, 1.0, dev);
    let b = random(&mut r, &[7, 2], DType::F32, -1.0, 1.0, dev);
    if let Ok(eager) = a.matmul(&b) {
        let fused = batched_fused().call(&[fuse::arg(&a), fuse::arg(&b)]).unwrap().remove(0);
        assert_close("eager batched matmul", &eager, &fused, DType::F32, dev);
    }
}

fn view_errors_are_clear(dev: &Device) {
    let x = random(&mut TestRng::new(37), &[3, 4], DType::F32, -1.0, 1.0, dev);
    let message = |r: Result<Tensor>| match r {
        Err(e @ Error::Shape { .. }) => e.to_string(),
        other => panic!("expected a shape error, got {other:?}"),
    };
    let cases = [
        (message(x.transpose(0, 2)), "transpose: axis 2 is out of range for a tensor of shape [3, 4]"),
        (message(x.permute(&[0, 0])), "is not a permutation"),
        (message(x.narrow(1, 2, 3)), "narrow: start 2 + length 3 is past the end of axis 1 (size 4)"),
        (message(x.reshape(&[5, 2])), "cannot reshape [3, 4] (12 elements) into [5, 2] (10 elements)"),
        (message(cat(&[&x, &x.t().unwrap()], 0)), "cat along axis 0: shapes [3, 4] and [4, 3] differ on another axis"),
        (message(x.dim(2).map(|_| x.clone())), "dim: axis 2 is out of range"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "got {got:?}, want it to contain {want:?}");
    }
    // Inside #[fuse], the message quotes the user's expression.
    let y = random(&mut TestRng::new(38), &[2, 3], DType::F32, -1.0, 1.0, dev);
    match views_in_groups_fused().call(&[fuse::arg(&x), fuse::arg(&y), fuse::arg(&3usize), fuse::arg(&2usize)]) {
        Err(e @ Error::Shape { .. }) => assert!(e.to_string().contains("x.narrow(-1, start, len)"), "{e}"),
        other => panic!("narrow out of range: expected a shape error, got {other:?}"),
    }
}

fuse::device_tests!(
    heads_match_reference,
    views_read_by_groups_match_reference,
    reshape_needing_a_copy_matches_reference,
    patchify_matches_reference,
    cat_matches_reference,
    matmul_broadcasts_batch_axes,
    eager_views_match,
    view_errors_are_clear,
    slice_set_writes_in_place,
    slice_set_errors_are_clear,
    slice_set_at_a_position_held_in_a_tensor,
);
