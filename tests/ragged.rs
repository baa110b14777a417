//! A batch of sequences at their own positions in one fused decode step: rope with per-sequence tables
//! (cos and sin `[b, seq, d/2]`), the cache appends at per-sequence offsets (`at` of `[b]` positions), and
//! attention over each sequence's own key count. Each step is checked against the same function run on each
//! sequence alone (one position table, one offset: the paths that existed before), outputs and caches;
//! then captured once as a CUDA graph and replayed as the sequences advance (one of them finished, its
//! position held), with the positions written into the same device tensors between replays.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};
use std::sync::Mutex;

/// One test at a time: a fault a kernel records (an offset past the room) is the device's, reported at the
/// next synchronisation of whichever test reaches it first.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[fuse]
#[allow(clippy::too_many_arguments)]
fn decode_step(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    at: &Tensor,
    lens: &Tensor,
    scale: f32,
) -> Result<Tensor> {
    let q = rope(&q.transpose(1, 2), cos, sin);
    let k = rope(&k.transpose(1, 2), cos, sin);
    let k_cache = k_cache.slice_set(&k, 2, at);
    let v_cache = v_cache.slice_set(&v.transpose(1, 2), 2, at);
    Ok(attention_len(&q, &k_cache, &v_cache, lens, scale, true))
}

const B: usize = 3;
const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 16;
const CAPACITY: usize = 11;

/// The rotary tables' rows of `positions` (one row each), `[positions.len(), D / 2]`.
fn tables(positions: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for &p in positions {
        for i in 0..D / 2 {
            let angle = p as f32 / 10_000f32.powf(2.0 * i as f32 / D as f32);
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}

/// One step's new rows of every sequence: q `[b, 1, hq, d]`, k and v `[b, 1, hkv, d]`.
fn new_rows(r: &mut TestRng, dtype: DType, dev: &Device) -> [Tensor; 3] {
    [HQ, HKV, HKV].map(|h| random(r, &[B, 1, h, D], dtype, -1.0, 1.0, dev))
}

/// Sequence `s`'s rows of `t` (its first axis), dense.
fn of(t: &Tensor, s: usize) -> Tensor {
    t.narrow(0, s, 1).unwrap().contiguous().unwrap()
}

fn sequences_at_their_own_positions_step_as_one_batch(dev: &Device) {
    let _alone = one_at_a_time();
    let dtypes: &[DType] = if dev.is_cuda() { &[DType::F32, DType::BF16] } else { &[DType::F32] };
    for &dtype in dtypes {
        let mut r = TestRng::new(101);
        let cache = || random(&mut TestRng::new(102), &[B, HKV, CAPACITY, D], dtype, -1.0, 1.0, dev);
        let (k_cache, v_cache) = (cache(), cache());
        // Each sequence alone: its own caches (copies), run with one position table and one offset.
        let alone: Vec<(Tensor, Tensor)> = (0..B).map(|s| (of(&k_cache, s), of(&v_cache, s))).collect();
        let mut positions = [0u32, 6, 3];
        for step in 0..5 {
            let (cos, sin) = tables(&positions);
            let table = |v: Vec<f32>| Tensor::from_vec(v, &[B, 1, D / 2], dev).unwrap().to_dtype(dtype).unwrap();
            let (cos_t, sin_t) = (table(cos.clone()), table(sin.clone()));
            let at = Tensor::from_vec(positions.to_vec(), &[B], dev).unwrap();
            let lens = Tensor::from_vec(positions.iter().map(|p| p + 1).collect(), &[B], dev).unwrap();
            let [q, k, v] = new_rows(&mut r, dtype, dev);
            let got = decode_step(&q, &k, &v, &cos_t, &sin_t, &k_cache, &v_cache, &at, &lens, 0.25).expect("batch");
            assert_eq!(got.shape(), &[B, HQ, 1, D]);
            for (s, (kc, vc)) in alone.iter().enumerate() {
                let row = |v: &[f32]| v[s * D / 2..(s + 1) * D / 2].to_vec();
                let table = |v: Vec<f32>| Tensor::from_vec(v, &[1, D / 2], dev).unwrap().to_dtype(dtype).unwrap();
                let (c, sn) = (table(row(&cos)), table(row(&sin)));
                let at = Tensor::from_vec(vec![positions[s]], &[1], dev).unwrap();
                let lens = Tensor::from_vec(vec![positions[s] + 1], &[1], dev).unwrap();
                let want = decode_step(&of(&q, s), &of(&k, s), &of(&v, s), &c, &sn, kc, vc, &at, &lens, 0.25)
                    .expect("one sequence");
                let what = format!("{dtype} step {step}, sequence {s} at {}", positions[s]);
                assert_close(&what, &of(&got, s), &want, dtype, dev);
                assert_close(&format!("{what}: keys"), &of(&k_cache, s), kc, dtype, dev);
                assert_close(&format!("{what}: values"), &of(&v_cache, s), vc, dtype, dev);
            }
            // Sequence 1 finishes after step 2: its position stays (its rows are written again there).
            positions = [positions[0] + 2, if step < 2 { positions[1] + 1 } else { positions[1] }, positions[2] + 1];
        }
    }
}

fn a_captured_batched_step_replays_as_sequences_advance(dev: &Device) {
    let _alone = one_at_a_time();
    let dtype = DType::F32;
    let mut r = TestRng::new(103);
    let cache = |seed| random(&mut TestRng::new(seed), &[B, HKV, CAPACITY, D], dtype, -1.0, 1.0, dev);
    let (graphed_k, graphed_v, plain_k, plain_v) = (cache(104), cache(105), cache(104), cache(105));
    let [q, k, v] = new_rows(&mut r, dtype, dev);
    let zeros = |shape: &[usize]| Tensor::zeros(shape, dtype, dev).unwrap();
    let (cos, sin) = (zeros(&[B, 1, D / 2]), zeros(&[B, 1, D / 2]));
    let at = Tensor::from_vec(vec![0u32; B], &[B], dev).unwrap();
    let lens = Tensor::from_vec(vec![1u32; B], &[B], dev).unwrap();
    let inputs = [q.clone(), k.clone(), v.clone(), cos.clone(), sin.clone(), at.clone(), lens.clone()];
    let out = zeros(&[B, HQ, 1, D]);
    let set = |positions: &[u32]| {
        let (c, s) = tables(positions);
        cos.copy_from_host(&c).unwrap();
        sin.copy_from_host(&s).unwrap();
        at.copy_from_host(positions).unwrap();
        lens.copy_from_host(&positions.iter().map(|p| p + 1).collect::<Vec<u32>>()).unwrap();
    };
    set(&[0, 0, 0]);
    let run = |kc: &Tensor, vc: &Tensor| {
        let [q, k, v, cos, sin, at, lens] = &inputs;
        decode_step(q, k, v, cos, sin, kc, vc, at, lens, 0.25)
    };
    run(&graphed_k, &graphed_v).expect("the step once before the capture (compiles, tunes)");
    run(&plain_k, &plain_v).expect("the same step on the other caches");
    let (gk, gv, o) = (graphed_k.clone(), graphed_v.clone(), out.clone());
    let captured = inputs.clone();
    let mut graph = CudaGraph::capture(dev, move || {
        let [q, k, v, cos, sin, at, lens] = &captured;
        o.slice_set(&decode_step(q, k, v, cos, sin, &gk, &gv, at, lens, 0.25)?, 0, 0).map(|_| ())
    })
    .expect("capture");
    for positions in [[1u32, 4, 2], [2, 5, 2], [3, 6, 2], [9, 10, 2]] {
        set(&positions);
        graph.replay().expect("replay");
        let want = run(&plain_k, &plain_v).expect("call by call");
        assert_close(&format!("replay at {positions:?}"), &out, &want, dtype, dev);
    }
    assert_close("keys after the replays", &graphed_k, &plain_k, dtype, dev);
    assert_close("values after the replays", &graphed_v, &plain_v, dtype, dev);
}

fn offsets_and_tables_of_the_wrong_shape_are_errors(dev: &Device) {
    let _alone = one_at_a_time();
    let mut r = TestRng::new(106);
    let [q, k, v] = new_rows(&mut r, DType::F32, dev);
    let cache = Tensor::zeros(&[B, HKV, CAPACITY, D], DType::F32, dev).unwrap();
    let values = Tensor::zeros(&[B, HKV, CAPACITY, D], DType::F32, dev).unwrap();
    let table = Tensor::zeros(&[B, 1, D / 2], DType::F32, dev).unwrap();
    let lens = Tensor::from_vec(vec![1u32; B], &[B], dev).unwrap();
    let two = Tensor::from_vec(vec![0u32; 2], &[2], dev).unwrap();
    let e = decode_step(&q, &k, &v, &table, &table, &cache, &values, &two, &lens, 0.25).unwrap_err().to_string();
    assert!(e.contains("one for each of the 3 indices"), "{e}");
    let at = Tensor::from_vec(vec![0u32; B], &[B], dev).unwrap();
    let wrong = Tensor::zeros(&[2, 1, D / 2], DType::F32, dev).unwrap();
    let e = decode_step(&q, &k, &v, &wrong, &wrong, &cache, &values, &at, &lens, 0.25).unwrap_err().to_string();
    assert!(e.contains("[b, seq, d/2]"), "{e}");
    // A position past the room left, for one sequence only: an error that names it, on either device.
    let past = Tensor::from_vec(vec![0u32, CAPACITY as u32, 0], &[B], dev).unwrap();
    let e =
        decode_step(&q, &k, &v, &table, &table, &cache, &values, &past, &lens, 0.25).and_then(|t| t.to_vec::<f32>());
    let e = e.unwrap_err().to_string();
    assert!(e.contains("slice_set") && e.contains(&CAPACITY.to_string()), "{e}");
}

#[fuse]
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    Ok(rope(&x.transpose(1, 2), cos, sin))
}

/// Several positions of each sequence (a prefill of a ragged batch), x read transposed, tables strided.
fn per_sequence_tables_rotate_each_sequence_by_its_own(dev: &Device) {
    let _alone = one_at_a_time();
    let mut r = TestRng::new(107);
    let (b, s, h, d) = (2, 5, 3, 8);
    let x = random(&mut r, &[b, s, h, d], DType::F32, -1.0, 1.0, dev);
    // [b, s, d/2] tables read through a transpose of [b, d/2, s] ones.
    let cos = random(&mut r, &[b, d / 2, s], DType::F32, -1.0, 1.0, dev).transpose(1, 2).unwrap();
    let sin = random(&mut r, &[b, d / 2, s], DType::F32, -1.0, 1.0, dev).transpose(1, 2).unwrap();
    let got = rotate(&x, &cos, &sin).expect("batched tables");
    for q in 0..b {
        let table = |t: &Tensor| t.narrow(0, q, 1).unwrap().reshape(&[s, d / 2]).unwrap();
        let want = rotate(&of(&x, q), &table(&cos), &table(&sin)).expect("one table");
        assert_close(&format!("sequence {q}"), &of(&got, q), &want, DType::F32, dev);
    }
}

/// One sequence's new rows written through a view of the cache (its index of the first axis).
#[fuse]
fn append_to(cache: &Tensor, rows: &Tensor, sequence: usize, at: &Tensor) -> Result<Tensor> {
    Ok(cache.narrow(0, sequence, 1).slice_set(rows, 2, at))
}

fn a_view_of_an_argument_is_a_slice_set_destination(dev: &Device) {
    let _alone = one_at_a_time();
    let mut r = TestRng::new(108);
    let cache = random(&mut r, &[B, HKV, CAPACITY, D], DType::F32, -1.0, 1.0, dev);
    let before: Vec<f32> = cache.to_vec().unwrap();
    let rows = random(&mut r, &[1, HKV, 2, D], DType::F32, -1.0, 1.0, dev);
    let at = Tensor::from_vec(vec![5u32], &[1], dev).unwrap();
    let got = append_to(&cache, &rows, 1, &at).expect("append through a narrow view");
    assert_eq!(got.shape(), &[1, HKV, CAPACITY, D]);
    let (after, new): (Vec<f32>, Vec<f32>) = (cache.to_vec().unwrap(), rows.to_vec().unwrap());
    let at = |b: usize, h: usize, p: usize| ((b * HKV + h) * CAPACITY + p) * D;
    for b in 0..B {
        for h in 0..HKV {
            for p in 0..CAPACITY {
                let (i, written) = (at(b, h, p), b == 1 && (5..7).contains(&p));
                let want = if written { &new[((h * 2) + p - 5) * D..][..D] } else { &before[i..i + D] };
                assert_eq!(&after[i..i + D], want, "sequence {b}, head {h}, position {p} on {dev}");
            }
        }
    }
}

fuse::device_tests!(
    a_view_of_an_argument_is_a_slice_set_destination,
    sequences_at_their_own_positions_step_as_one_batch,
    per_sequence_tables_rotate_each_sequence_by_its_own,
    a_captured_batched_step_replays_as_sequences_advance,
    offsets_and_tables_of_the_wrong_shape_are_errors
);
