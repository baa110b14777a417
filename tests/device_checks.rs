//! Checks that kernels make on values only the GPU holds (an embedding id, a slice_set position held in a
//! tensor): the kernel skips the access, and the next synchronisation reports it (`Error::DeviceCheck`),
//! once. The CPU refuses the same calls at once. One test per device: a GPU's fault record is shared by
//! every thread, so a report must not be taken by another test's synchronisation.

#[path = "common/decode_step.rs"]
mod decode_step;

use decode_step::decode_step_attention;
use fuse::prelude::*;

fn bad_ids_and_positions_are_reported(dev: &Device) {
    let table = Tensor::from_vec(vec![0.5f32; 12], &[4, 3], dev).unwrap();
    let ids = Tensor::from_vec(vec![1u32, 4, 0], &[3], dev).unwrap();
    let err = embedding(&ids, &table).and_then(|t| t.to_vec::<f32>()).expect_err("id 4 of 4");
    assert!(err.to_string().contains("token id 4 is out of range for a vocabulary of 4"), "{err}");
    if dev.is_cuda() {
        assert!(matches!(err, Error::DeviceCheck { op: "embedding", .. }), "{err}");
    }
    // Reported once: the next reads are clean.
    let good = Tensor::from_vec(vec![1u32, 3], &[2], dev).unwrap();
    assert_eq!(embedding(&good, &table).unwrap().to_vec::<f32>().unwrap(), vec![0.5f32; 6]);

    let cache = Tensor::from_vec((0..10).map(|i| i as f32).collect::<Vec<_>>(), &[1, 5, 2], dev).unwrap();
    let rows = Tensor::from_vec(vec![-1.0f32; 4], &[1, 2, 2], dev).unwrap();
    let at = Tensor::from_vec(vec![4u32], &[1], dev).unwrap();
    let err = cache.slice_set(&rows, 1, &at).and_then(|t| t.to_vec::<f32>()).expect_err("offset 4 + 2 rows of 5");
    assert!(err.to_string().contains("offset 4"), "{err}");
    if dev.is_cuda() {
        assert!(matches!(err, Error::DeviceCheck { op: "slice_set", .. }), "{err}");
    }
    assert_eq!(cache.to_vec::<f32>().unwrap(), (0..10).map(|i| i as f32).collect::<Vec<_>>(), "nothing written");
    at.copy_from_host(&[3u32]).unwrap();
    cache.slice_set(&rows, 1, &at).unwrap();
    assert_eq!(&cache.to_vec::<f32>().unwrap()[6..], &[-1.0; 4], "offset 3 fits");
    // A decode step's appends past the caches, where rope, the appends and attention are one kernel on a GPU
    // (a position of 5 in caches of 5): reported the same way, and nothing written.
    let (b, hq, hkv, d, capacity) = (1, 4, 2, 8, 5);
    let qkv = Tensor::from_vec(
        (0..(hq + 2 * hkv) * d).map(|i| (i % 7) as f32 * 0.1).collect::<Vec<_>>(),
        &[b, 1, hq + 2 * hkv, d],
        dev,
    )
    .unwrap();
    let table = Tensor::from_vec(vec![0.5f32; d / 2], &[1, d / 2], dev).unwrap();
    let before: Vec<f32> = (0..b * hkv * capacity * d).map(|i| i as f32).collect();
    let [k_cache, v_cache] = [0; 2].map(|_| Tensor::from_vec(before.clone(), &[b, hkv, capacity, d], dev).unwrap());
    let (at, lens) =
        (Tensor::from_vec(vec![5u32], &[1], dev).unwrap(), Tensor::from_vec(vec![5u32], &[1], dev).unwrap());
    let err = decode_step_attention(&qkv, &table, &table, &k_cache, &v_cache, &at, &lens, hq, hkv, hq + hkv, 0.25)
        .and_then(|(out, _, _)| out.to_vec::<f32>())
        .expect_err("position 5 of 5");
    assert!(err.to_string().contains("offset 5"), "{err}");
    if dev.is_cuda() {
        assert!(matches!(err, Error::DeviceCheck { op: "slice_set", .. }), "{err}");
    }
    for cache in [&k_cache, &v_cache] {
        assert_eq!(cache.to_vec::<f32>().unwrap(), before, "nothing written");
    }
}

/// attention_len's key counts that do not fit (more than the cache holds; under causal fewer than the
/// queries): the CPU refuses them at the call; on a GPU the decode kernel (1 query) records them (and clamps),
/// and a one-block check before the prefill kernel (40 queries of a head: more than a decode block holds),
/// reported at the next synchronisation, once.
fn key_counts_that_do_not_fit_are_reported(dev: &Device) {
    let (capacity, d) = (48, 64);
    let cache = Tensor::from_vec(vec![0.25f32; 2 * 3 * capacity * d], &[2, 3, capacity, d], dev).unwrap();
    let queries_cases: &[usize] = &[4, 1, 40];
    for &queries in queries_cases {
        let q = Tensor::from_vec(vec![0.5f32; 2 * 9 * queries * d], &[2, 9, queries, d], dev).unwrap();
        let least = queries.to_string();
        let cases = [(false, [48u32, 49], ["49", "48"]), (true, [48, 0], ["0", least.as_str()])];
        for (causal, counts, says) in cases {
            let lens = Tensor::from_vec(counts.to_vec(), &[2], dev).unwrap();
            let err = attention_len(&q, &cache, &cache, &lens, 0.125, causal)
                .and_then(|t| t.to_vec::<f32>())
                .expect_err("a key count that does not fit");
            let text = err.to_string();
            assert!(text.contains(says[0]) && text.contains(says[1]), "{queries} queries, causal {causal}: {text}");
            if dev.is_cuda() {
                assert!(matches!(err, Error::DeviceCheck { op: "attention_len", .. }), "{err}");
            }
            // Reported once: a call with counts that fit reads clean.
            let fits = Tensor::from_vec(vec![48u32, queries as u32], &[2], dev).unwrap();
            let out = attention_len(&q, &cache, &cache, &fits, 0.125, causal).and_then(|t| t.to_vec::<f32>());
            assert!(out.is_ok(), "{:?}", out.err());
        }
    }
}

fn all_in_order(dev: &Device) {
    bad_ids_and_positions_are_reported(dev);
    key_counts_that_do_not_fit_are_reported(dev);
}

fuse::device_tests!(all_in_order);
