//! The real file: metadata, tensor layout, dequantised values against sums computed with the `gguf` Python
//! package and transformers (float64 sums over each tensor), and dequantisation speed.

mod common;

use std::time::Instant;

use fuse_models::ggml_type::GgmlType;
use fuse_models::rotary::unpermute_rotary_rows;

/// (sum, sum of squares) in f64, to compare with the Python values.
fn sums(values: &[f32]) -> (f64, f64) {
    values.iter().fold((0.0, 0.0), |(s, q), &v| (s + v as f64, q + (v as f64) * (v as f64)))
}

fn assert_close(got: f64, expected: f64, what: &str) {
    assert!((got - expected).abs() <= 1e-6 * expected.abs().max(1.0), "{what}: {got} vs {expected}");
}

#[test]
fn metadata_and_layout() {
    let Some(file) = common::model() else { return };
    assert_eq!((file.version(), file.alignment(), file.tensors().len()), (3, 32, 272));
    assert_eq!(file.str("general.architecture").unwrap(), "llama");
    let dims = ["embedding_length", "feed_forward_length", "block_count", "attention.head_count"];
    let got: Vec<u32> = dims.iter().map(|k| file.u32(&format!("llama.{k}")).unwrap()).collect();
    assert_eq!(got, [576, 1536, 30, 9]);
    assert_eq!(file.u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(file.f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert!((file.f32("llama.attention.layer_norm_rms_epsilon").unwrap() - 1e-5).abs() < 1e-9);
    assert_eq!(file.strings("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert_eq!(file.strings("tokenizer.ggml.merges").unwrap().len(), 48900);

    let embd = file.tensor_info("token_embd.weight").unwrap();
    assert_eq!((embd.ggml_type, embd.shape()), (GgmlType::Q8_0, vec![49152, 576]));
    let gate = file.tensor_info("blk.0.ffn_gate.weight").unwrap();
    assert_eq!((gate.ggml_type, gate.shape()), (GgmlType::Q4_1, vec![1536, 576]));
    assert_eq!(file.tensor_info("blk.0.attn_k.weight").unwrap().shape(), vec![192, 576]);
    assert_eq!(file.tensor_info("output_norm.weight").unwrap().ggml_type, GgmlType::F32);
    assert!(file.tensor_info("output.weight").is_err(), "embeddings are tied: no separate output matrix");
}

#[test]
#[allow(clippy::excessive_precision)] // the values as Python printed them (f64 sums)
fn dequantised_values_match_python() {
    let Some(file) = common::model() else { return };
    // (name, sum, sum of squares, first values) from gguf.quants.dequantize (gguf 0.19).
    #[rustfmt::skip]
    let cases: [(&str, f64, f64, [f32; 4]); 4] = [
        ("token_embd.weight", -15353.04449415207, 520415.71544763993, [-0.10654449462890625, 0.032978057861328125, 0.048198699951171875, -0.022830963134765625]),
        ("blk.0.ffn_gate.weight", 330.11053466796875, 30300.522681292612, [0.00726318359375, 0.19891357421875, 0.1510009765625, -0.2322998046875]),
        ("blk.29.ffn_down.weight", 49.83570861816406, 29667.074891592143, [-0.2733154296875, 0.186279296875, 0.186279296875, 0.04840087890625]),
        ("output_norm.weight", 1038.33203125, 1921.7355499267578, [1.7578125, 1.8203125, 1.78125, 1.6015625]),
    ];
    for (name, sum, sum_sq, first) in cases {
        let values = file.tensor_f32(name).unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{name}: non-finite values");
        let (s, q) = sums(&values);
        assert_close(s, sum, name);
        assert_close(q, sum_sq, name);
        assert_eq!(&values[..4], &first, "{name}");
    }
    // bf16 is the f32 result rounded.
    let f32s = file.tensor_f32("blk.0.ffn_gate.weight").unwrap();
    let bf16s = file.tensor_bf16("blk.0.ffn_gate.weight").unwrap();
    assert!(f32s.iter().zip(&bf16s).all(|(f, b)| half::bf16::from_f32(*f) == *b));
}

#[test]
#[allow(clippy::excessive_precision)]
fn unpermuted_attention_rows_match_transformers() {
    let Some(file) = common::model() else { return };
    // transformers' q_proj / k_proj of layer 0: sum over rows r of r * (sum of row r), which depends on the
    // row order (the GGUF order gives 27988.94 for q).
    for (name, heads, expected) in
        [("blk.0.attn_q.weight", 9, 25876.190353393555), ("blk.0.attn_k.weight", 3, 4772.633193969727)]
    {
        let info = file.tensor_info(name).unwrap();
        let (rows, cols) = (info.shape()[0], info.shape()[1]);
        let hf = unpermute_rotary_rows(&file.tensor_f32(name).unwrap(), rows, cols, heads).unwrap();
        let weighted: f64 = hf.chunks(cols).enumerate().map(|(r, row)| r as f64 * sums(row).0).sum();
        assert_close(weighted, expected, name);
    }
}

#[test]
fn whole_model_dequantises() {
    let Some(file) = common::model() else { return };
    let start = Instant::now();
    let mut bytes = 0usize;
    let mut elements = 0usize;
    for info in file.tensors() {
        bytes += file.tensor_bytes(&info.name).unwrap().len();
        elements += file.tensor_f32(&info.name).unwrap().len();
    }
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(elements, 134_515_008);
    eprintln!(
        "dequantised {} tensors, {:.1} MB -> {elements} f32 in {seconds:.3} s ({:.0} MB/s of GGUF data)",
        file.tensors().len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / seconds
    );
}

/// The one-launch decode step's packing of the real file: SmolLM2's shapes and sizes, and a few rows of the
/// shares (QKV rows, queries and keys put back in half-split order; gate, up, down) dequantising to the
/// loader's values.
#[test]
fn packs_for_the_one_launch_decode_step() {
    let Some(file) = common::model() else { return };
    let packed = fuse_models::llama::DecodeStepWeights::pack(file).unwrap();
    let (shape, sh) = (packed.layout.shape, packed.layout.share);
    assert_eq!(
        (shape.hidden, shape.heads, shape.kv_heads, shape.intermediate, shape.layers, shape.vocab),
        (576, 9, 3, 1536, 30, 49152)
    );
    assert_eq!(shape.eps, 1e-5, "the file's layer_norm_rms_epsilon");
    assert_eq!(packed.shares.len(), 30 * 16 * sh.bytes);
    assert_eq!(
        (packed.head_q.len(), packed.head_d.len(), packed.rope.len()),
        (49152 * 576, 49152 * 18, fuse_models::llama::STEP_MAX_POSITIONS * 64)
    );
    // A share's row r of a stage, dequantised as ggml does (d * q + m).
    let row = |share: &[u8], q_at: usize, dm_at: usize, r: usize, kbs: usize| -> Vec<f32> {
        (0..kbs)
            .flat_map(|kb| {
                let dm = &share[dm_at + (r * kbs + kb) * 4..][..4];
                let d = half::f16::from_le_bytes([dm[0], dm[1]]).to_f32();
                let m = half::f16::from_le_bytes([dm[2], dm[3]]).to_f32();
                let qs: Vec<u8> = share[q_at + (r * kbs + kb) * 16..][..16].to_vec();
                (0..32).map(move |j| d * (if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 }) as f32 + m)
            })
            .collect()
    };
    for (layer, rank) in [(0usize, 0usize), (17, 5), (29, 15)] {
        let share = &packed.shares[(layer * 16 + rank) * sh.bytes..][..sh.bytes];
        let f32s = |part: &str| file.tensor_f32(&format!("blk.{layer}.{part}.weight")).unwrap();
        let mut qkv = unpermute_rotary_rows(&f32s("attn_q"), 576, 576, 9).unwrap();
        qkv.extend(unpermute_rotary_rows(&f32s("attn_k"), 192, 576, 3).unwrap());
        qkv.extend(f32s("attn_v"));
        let first = rank * 60; // the block's first QKV row (query rows for blocks 0-9, value rows for 13-15)
        assert_eq!(
            row(share, sh.qkv.nibbles.offset, sh.qkv.scales.offset, 0, 18),
            qkv[first * 576..(first + 1) * 576],
            "layer {layer} block {rank} first QKV row"
        );
        let (gate, up, down) = (f32s("ffn_gate"), f32s("ffn_up"), f32s("ffn_down"));
        assert_eq!(
            row(share, sh.gate_up.nibbles.offset, sh.gate_up.scales.offset, 0, 18),
            gate[rank * 96 * 576..][..576],
            "layer {layer} block {rank} first gate row"
        );
        assert_eq!(
            row(share, sh.gate_up.nibbles.offset, sh.gate_up.scales.offset, 96, 18),
            up[rank * 96 * 576..][..576],
            "layer {layer} block {rank} first up row"
        );
        assert_eq!(
            row(share, sh.down.nibbles.offset, sh.down.scales.offset, 35, 48),
            down[(rank * 36 + 35) * 1536..][..1536],
            "layer {layer} block {rank} last down row"
        );
    }
}
