//! The packer: it writes exactly the layout's bytes, every row of every share dequantises to the row the
//! library's loader gives that block, random weights have the layout, and what the kernel cannot read is
//! refused.

use super::{share_row, small_model};
use crate::gguf::GgufFile;
use crate::llama::step_kernel::*;
use crate::llama::Config;
use crate::rotary::unpermute_rotary_rows;

#[test]
fn the_packer_writes_exactly_the_layouts_bytes() {
    let (bytes, _) = small_model(11, false);
    let file = GgufFile::from_bytes(bytes, "small.gguf").unwrap();
    // A byte the packer writes is the same over zeros and over 0xFF; a byte it leaves keeps the fill.
    let (zeros, ones) =
        (DecodeStepWeights::pack_over(&file, 0).unwrap(), DecodeStepWeights::pack_over(&file, 0xFF).unwrap());
    let layout = zeros.layout;
    let regions = layout.share.regions();
    for (share, (a, b)) in
        zeros.shares.chunks(layout.share.bytes).zip(ones.shares.chunks(layout.share.bytes)).enumerate()
    {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            let owned = regions.iter().any(|(_, r)| (r.offset..r.end()).contains(&i));
            assert_eq!(x == y, owned, "share {share} byte {i}: written {}, in a region {owned}", x == y);
        }
    }
    assert_eq!(zeros.shares.len(), layout.shape.layers * STEP_SHARES * layout.share.bytes);
}

#[test]
fn every_share_row_is_the_loaders_row() {
    let (bytes, config) = small_model(7, false);
    let file = GgufFile::from_bytes(bytes, "small.gguf").unwrap();
    let packed = DecodeStepWeights::pack(&file).unwrap();
    let layout = packed.layout;
    assert_eq!(layout, StepLayout::of(&config).unwrap());
    let (s, sh) = (layout.shape, layout.share);
    let (h, ff, kv) = (s.hidden, s.intermediate, s.kv_heads * 64);
    for l in 0..s.layers {
        let f32s = |part: &str| file.tensor_f32(&format!("blk.{l}.{part}.weight")).unwrap();
        // The loader's matrices: q and k in half-split row order, q, k and v stacked.
        let mut qkv = unpermute_rotary_rows(&f32s("attn_q"), h, h, s.heads).unwrap();
        qkv.extend(unpermute_rotary_rows(&f32s("attn_k"), kv, h, s.kv_heads).unwrap());
        qkv.extend(f32s("attn_v"));
        let (o, gate, up, down) = (f32s("attn_output"), f32s("ffn_gate"), f32s("ffn_up"), f32s("ffn_down"));
        for rank in 0..STEP_SHARES {
            let share = &packed.shares[(l * STEP_SHARES + rank) * sh.bytes..][..sh.bytes];
            let row_of = |stage: &StageLayout, r: usize| {
                share_row(share, stage.nibbles.offset, stage.scales.offset, r, stage.blocks)
            };
            for r in 0..sh.qkv.rows {
                let row = rank * sh.qkv.rows + r;
                assert_eq!(row_of(&sh.qkv, r), qkv[row * h..(row + 1) * h], "layer {l} block {rank} QKV row {row}");
            }
            for r in 0..sh.o.rows {
                let row = rank * sh.o.rows + r;
                assert_eq!(row_of(&sh.o, r), o[row * h..(row + 1) * h], "layer {l} block {rank} o row {row}");
            }
            let half = sh.gate_up.rows / 2;
            for r in 0..sh.gate_up.rows {
                let (m, row) = if r < half { (&gate, rank * half + r) } else { (&up, rank * half + r - half) };
                assert_eq!(row_of(&sh.gate_up, r), m[row * h..(row + 1) * h], "layer {l} block {rank} gate/up row {r}");
            }
            for r in 0..sh.down.rows {
                let row = rank * sh.down.rows + r;
                assert_eq!(
                    row_of(&sh.down, r),
                    down[row * ff..(row + 1) * ff],
                    "layer {l} block {rank} down row {row}"
                );
            }
            let norm = |at: usize| {
                (0..h).map(|i| f32::from_le_bytes(share[at + 4 * i..][..4].try_into().unwrap())).collect::<Vec<_>>()
            };
            assert_eq!(norm(sh.norm1.offset), f32s("attn_norm"));
            assert_eq!(norm(sh.norm2.offset), f32s("ffn_norm"));
        }
    }
    // The token matrix: (byte - 128) * d is the loader's value.
    let embd = file.tensor_f32("token_embd.weight").unwrap();
    for (i, want) in embd.iter().enumerate() {
        let d = half::f16::from_bits(packed.head_d[i / 32]).to_f32();
        assert_eq!((packed.head_q[i] as f32 - 128.0) * d, *want, "token matrix element {i}");
    }
    assert_eq!(packed.out_norm, file.tensor_f32("output_norm.weight").unwrap());
    // The rope table: cos and sin of p * theta^(-2i/64).
    assert_eq!(packed.rope.len(), STEP_MAX_POSITIONS * 64);
    for (p, i) in [(0usize, 0usize), (1, 0), (5, 31), (STEP_MAX_POSITIONS - 1, 7)] {
        let angle = p as f32 * (1.0 / 10000f32.powf((2 * i) as f32 / 64.0));
        assert_eq!((packed.rope[p * 64 + i], packed.rope[p * 64 + 32 + i]), (angle.cos(), angle.sin()));
    }
}

#[test]
fn a_layer_matrix_not_in_q4_1_is_refused() {
    let (bytes, _) = small_model(3, true);
    let file = GgufFile::from_bytes(bytes, "q8_0_values.gguf").unwrap();
    // The loader reads it (it dequantises any supported type); the step needs the file's Q4_1 blocks.
    assert_eq!(file.tensor_f32("blk.0.attn_v.weight").unwrap().len(), 64 * 128);
    let err = DecodeStepWeights::pack(&file).err().expect("a Q8_0 attn_v is refused").to_string();
    assert!(err.contains("blk.0.attn_v.weight is Q8_0") && err.contains("reads Q4_1 [64, 128]"), "{err}");
}

#[test]
fn the_decoder_needs_a_gpu_and_says_so() {
    let (bytes, _) = small_model(5, false);
    let file = GgufFile::from_bytes(bytes, "small.gguf").unwrap();
    let err =
        crate::llama::OneLaunchDecoder::new(&file, &fuse::Device::Cpu).err().expect("refused on the CPU").to_string();
    assert!(err.contains("runs on a GPU"), "{err}");
}

#[test]
fn random_weights_have_the_layout_and_plausible_values() {
    let config = Config::smollm2_135m();
    let w = DecodeStepWeights::random(&config, 3).unwrap();
    let (s, sh) = (w.layout.shape, w.layout.share);
    assert_eq!(w.shares.len(), s.layers * STEP_SHARES * sh.bytes);
    assert_eq!(
        (w.head_q.len(), w.head_d.len(), w.out_norm.len()),
        (s.vocab * s.hidden, s.vocab * s.hidden / 32, s.hidden)
    );
    let share = &w.shares[5 * sh.bytes..][..sh.bytes];
    // A gate/up row: scales in (0.004, 0.012), minimums -7.5 scales, so values within about +-0.1.
    let row = share_row(share, sh.gate_up.nibbles.offset, sh.gate_up.scales.offset, 7, sh.gate_up.blocks);
    assert!(row.iter().all(|v| v.abs() < 0.1) && row.iter().any(|v| v.abs() > 0.01), "{row:?}");
    let norm = f32::from_le_bytes(share[sh.norm2.offset..][..4].try_into().unwrap());
    assert!((0.9..1.1).contains(&norm), "{norm}");
    assert!(w.head_q.iter().all(|&q| q >= 1), "Q8_0 values -127..127");
    assert_ne!(DecodeStepWeights::random(&config, 4).unwrap().shares[..64], w.shares[..64], "the seed matters");
}
