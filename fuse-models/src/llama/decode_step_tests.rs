//! The one-launch decode step's packing: its layout agrees with what the kernel reports on the GPU, every row of
//! every share dequantises to the row the library's loader would give that block, and models the kernel cannot
//! run are refused with the reason.

use super::*;
use crate::gguf::tests::Image;
use crate::rotary::unpermute_rotary_rows;

#[test]
fn smollm2s_layout_is_the_kernels() {
    // scripts/kernels/cluster_step.cu printed these on the H200 (2026-12-01): "221736 bytes of shared memory a
    // block (142848 of weights)"; with the LM head's ring of 5 chunks (5 more mbarriers), common.cuh compiled on
    // the host with nvcc (2026-12-01) gives 221776. Its build had 1024 positions (the kernel's default); the
    // library builds it for STEP_MAX_POSITIONS.
    let library = StepShape::of(&Config::smollm2_135m()).unwrap();
    let shape = StepShape { max_positions: 1024, ..library };
    // The other builds: common.cuh's Share::bytes and Smem::bytes() compiled on the host with nvcc (2026-12-01)
    // give 160128 / 222672 on tensor cores (128 preloaded keys, rows in tiles of 16), and with 2048 positions
    // 142848 / 225280 and 160128 / 226176.
    let tiled = shape.with_tensor_cores().unwrap();
    assert_eq!((tiled.share_bytes(), tiled.shared_memory_bytes()), (160_128, 222_672));
    assert_eq!(StepShape { max_positions: 2048, ..library }.shared_memory_bytes(), 225_280);
    assert_eq!(StepShape { max_positions: 2048, ..tiled }.shared_memory_bytes(), 226_176);
    assert!(library.with_tensor_cores().unwrap().shared_memory_bytes() <= STEP_SHARED_MEMORY_LIMIT);
    assert_eq!(shape.share_bytes(), 142_848);
    assert_eq!(shape.shared_memory_bytes(), 221_776);
    assert_eq!(shape.rows(), [60, 36, 192, 36]);
    assert_eq!((shape.head_slots(), tiled.head_slots()), (5, 5));
    assert_eq!(library.max_positions, STEP_MAX_POSITIONS);
    assert!(library.shared_memory_bytes() <= STEP_SHARED_MEMORY_LIMIT);
    assert_eq!(
        library.defines(),
        [
            "-DFUSE_STEP_HID=576",
            "-DFUSE_STEP_HEADS=9",
            "-DFUSE_STEP_KV_HEADS=3",
            "-DFUSE_STEP_FF=1536",
            "-DFUSE_STEP_LAYERS=30",
            "-DFUSE_STEP_VOCAB=49152",
            &format!("-DFUSE_STEP_MAX_POSITIONS={STEP_MAX_POSITIONS}"),
            "-DFUSE_STEP_MMA=0"
        ]
    );
}

#[test]
fn shapes_past_the_kernels_limits_are_refused_with_the_reason() {
    let base = Config::smollm2_135m();
    let cases: [(Config, &str); 6] = [
        (Config { head_dim: 128, hidden: 1152, ..base.clone() }, "heads of 128 dimensions"),
        (Config { intermediate: 1000, ..base.clone() }, "intermediate size 1000"),
        (Config { vocab: 70_000, ..base.clone() }, "a vocabulary of 70000"),
        (Config { vocab: 49_150, ..base.clone() }, "a vocabulary of 49150"),
        (Config { hidden: 608, ..base.clone() }, "hidden size 608"),
        (Config { heads: 32, kv_heads: 8, hidden: 2048, ..base.clone() }, "32 query heads"),
    ];
    for (config, reason) in cases {
        let err = StepShape::of(&config).unwrap_err().to_string();
        assert!(err.contains("cannot run this model") && err.contains(reason), "{err}");
    }
}

/// A small Llama in a GGUF image: Q4_1 layer matrices (the value projections in Q8_0 when `v_in_q8_0`), Q8_0
/// token matrix, F32 norms, random bytes.
fn small_model(seed: u64, v_in_q8_0: bool) -> (Vec<u8>, Config) {
    let config = Config {
        hidden: 128,
        intermediate: 512,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
        vocab: 48,
        context: 256,
        rope_theta: 10000.0,
        eps: 1e-5,
    };
    let c = &config;
    let mut state = seed;
    let mut byte = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u8
    };
    let f16_bits = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
    let mut tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)> = Vec::new();
    let mut matrix =
        |name: String, rows: usize, cols: usize, q8_0: bool, tensors: &mut Vec<(String, Vec<u64>, u32, Vec<u8>)>| {
            let mut data = Vec::new();
            for _ in 0..rows * cols / 32 {
                let d = 0.001 + byte() as f32 * 1e-4;
                data.extend(f16_bits(d));
                if !q8_0 {
                    data.extend(f16_bits(-8.0 * d + byte() as f32 * 1e-5));
                }
                data.extend((0..if q8_0 { 32 } else { 16 }).map(|_| byte()));
            }
            tensors.push((name, vec![cols as u64, rows as u64], if q8_0 { 8 } else { 3 }, data));
        };
    let kv = c.kv_heads * c.head_dim;
    for l in 0..c.layers {
        for (part, rows, cols) in [
            ("attn_q", c.hidden, c.hidden),
            ("attn_k", kv, c.hidden),
            ("attn_v", kv, c.hidden),
            ("attn_output", c.hidden, c.hidden),
            ("ffn_gate", c.intermediate, c.hidden),
            ("ffn_up", c.intermediate, c.hidden),
            ("ffn_down", c.hidden, c.intermediate),
        ] {
            matrix(format!("blk.{l}.{part}.weight"), rows, cols, v_in_q8_0 && part == "attn_v", &mut tensors);
        }
        for part in ["attn_norm", "ffn_norm"] {
            let data = (0..c.hidden).flat_map(|i| (0.9 + 0.001 * (i + l) as f32).to_le_bytes()).collect();
            tensors.push((format!("blk.{l}.{part}.weight"), vec![c.hidden as u64], 0, data));
        }
    }
    let mut embd = Vec::new();
    for b in 0..c.vocab * c.hidden / 32 {
        embd.extend(f16_bits(0.01 + b as f32 * 1e-5));
        embd.extend((0..32).map(|_| byte()));
    }
    tensors.push(("token_embd.weight".into(), vec![c.hidden as u64, c.vocab as u64], 8, embd));
    tensors.push((
        "output_norm.weight".into(),
        vec![c.hidden as u64],
        0,
        (0..c.hidden).flat_map(|i| (1.0 + 0.01 * i as f32).to_le_bytes()).collect(),
    ));

    let u32_kv = |v: usize| (v as u32).to_le_bytes().to_vec();
    let mut tokens = 8u32.to_le_bytes().to_vec();
    tokens.extend((c.vocab as u64).to_le_bytes());
    for i in 0..c.vocab {
        let t = format!("t{i}");
        tokens.extend((t.len() as u64).to_le_bytes());
        tokens.extend(t.as_bytes());
    }
    let kvs: Vec<(&str, u32, Vec<u8>)> = vec![
        ("llama.embedding_length", 4, u32_kv(c.hidden)),
        ("llama.feed_forward_length", 4, u32_kv(c.intermediate)),
        ("llama.block_count", 4, u32_kv(c.layers)),
        ("llama.attention.head_count", 4, u32_kv(c.heads)),
        ("llama.attention.head_count_kv", 4, u32_kv(c.kv_heads)),
        ("llama.context_length", 4, u32_kv(c.context)),
        ("llama.rope.freq_base", 6, (c.rope_theta as f32).to_le_bytes().to_vec()),
        ("llama.attention.layer_norm_rms_epsilon", 6, c.eps.to_le_bytes().to_vec()),
        ("tokenizer.ggml.tokens", 9, tokens),
    ];
    let mut image = Image::header(3, tensors.len() as u64, kvs.len() as u64);
    for (key, ty, value) in &kvs {
        image.kv(key, *ty, value);
    }
    let mut offset = 0u64;
    for (name, dims, ty, data) in &tensors {
        image.tensor(name, dims, *ty, offset);
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    image.pad_to(32);
    for (_, _, _, data) in &tensors {
        image.raw(data).pad_to(32);
    }
    (image.finish(), config)
}

/// A share's row dequantised: d * q + m for its kbs blocks, as ggml (and fuse-models' loader) computes it.
fn share_row(share: &[u8], q_at: usize, dm_at: usize, row: usize, kbs: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for kb in 0..kbs {
        let dm = &share[dm_at + (row * kbs + kb) * 4..][..4];
        let (d, m) =
            (half::f16::from_le_bytes([dm[0], dm[1]]).to_f32(), half::f16::from_le_bytes([dm[2], dm[3]]).to_f32());
        let qs = &share[q_at + (row * kbs + kb) * 16..][..16];
        out.extend((0..32).map(|j| d * (if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 }) as f32 + m));
    }
    out
}

/// The same from the tensor cores' tiles of 16 rows (`put_rows`): row r's words of bytes 2t, 2t + 8, 2t + 1,
/// 2t + 9 at lane 4 (r % 8) + t, the second of the lane's pair for rows 8-15 of the tile.
fn tiled_row(share: &[u8], q_at: usize, dm_at: usize, row: usize, kbs: usize) -> Vec<f32> {
    let (g, second) = (row % 8, (row % 16) / 8);
    let mut out = Vec::new();
    for kb in 0..kbs {
        let unit = (row / 16) * kbs + kb;
        let mut qs = [0u8; 16];
        for t in 0..4 {
            let w = &share[q_at + ((unit * 32 + 4 * g + t) * 2 + second) * 4..][..4];
            (qs[2 * t], qs[2 * t + 8], qs[2 * t + 1], qs[2 * t + 9]) = (w[0], w[1], w[2], w[3]);
        }
        let dm = &share[dm_at + ((unit * 8 + g) * 2 + second) * 4..][..4];
        let (d, m) =
            (half::f16::from_le_bytes([dm[0], dm[1]]).to_f32(), half::f16::from_le_bytes([dm[2], dm[3]]).to_f32());
        out.extend((0..32).map(|j| d * (if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 }) as f32 + m));
    }
    out
}

#[test]
fn every_share_row_is_the_loaders_row() {
    every_share_row_is_the_loaders_row_in(false);
}

#[test]
fn every_tiled_share_row_is_the_loaders_row_and_the_padding_is_zero() {
    every_share_row_is_the_loaders_row_in(true);
}

fn every_share_row_is_the_loaders_row_in(tensor_cores: bool) {
    let (bytes, config) = small_model(7, false);
    let file = GgufFile::from_bytes(bytes, "small.gguf").unwrap();
    let packed = DecodeStepWeights::pack_as(&file, tensor_cores).unwrap();
    let shape = packed.shape;
    assert_eq!(StepShape { tensor_cores, ..StepShape::of(&config).unwrap() }, shape);
    let share_row = |share: &[u8], q_at: usize, dm_at: usize, row: usize, kbs: usize| {
        if tensor_cores {
            tiled_row(share, q_at, dm_at, row, kbs)
        } else {
            share_row(share, q_at, dm_at, row, kbs)
        }
    };
    let (h, ff, kv) = (shape.hidden, shape.intermediate, shape.kv_heads * 64);
    let layout = shape.share_layout();
    let [r_qkv, r_o, r_gu, r_d] = shape.rows();
    for l in 0..shape.layers {
        let f32s = |part: &str| file.tensor_f32(&format!("blk.{l}.{part}.weight")).unwrap();
        // The loader's matrices: q and k in half-split row order, q, k and v stacked.
        let mut qkv = unpermute_rotary_rows(&f32s("attn_q"), h, h, shape.heads).unwrap();
        qkv.extend(unpermute_rotary_rows(&f32s("attn_k"), kv, h, shape.kv_heads).unwrap());
        qkv.extend(f32s("attn_v"));
        let (o, gate, up, down) = (f32s("attn_output"), f32s("ffn_gate"), f32s("ffn_up"), f32s("ffn_down"));
        for rank in 0..STEP_SHARES {
            let share = &packed.shares[(l * STEP_SHARES + rank) * shape.share_bytes()..][..shape.share_bytes()];
            for r in 0..r_qkv {
                let row = rank * r_qkv + r;
                assert_eq!(
                    share_row(share, layout[0], layout[1], r, h / 32),
                    qkv[row * h..(row + 1) * h],
                    "layer {l} block {rank} QKV row {row}"
                );
            }
            for r in 0..r_o {
                let row = rank * r_o + r;
                assert_eq!(
                    share_row(share, layout[2], layout[3], r, h / 32),
                    o[row * h..(row + 1) * h],
                    "layer {l} block {rank} o row {row}"
                );
            }
            for r in 0..r_gu {
                let (m, row) =
                    if r < r_gu / 2 { (&gate, rank * r_gu / 2 + r) } else { (&up, rank * r_gu / 2 + r - r_gu / 2) };
                assert_eq!(
                    share_row(share, layout[4], layout[5], r, h / 32),
                    m[row * h..(row + 1) * h],
                    "layer {l} block {rank} gate/up row {r}"
                );
            }
            for r in 0..r_d {
                let row = rank * r_d + r;
                assert_eq!(
                    share_row(share, layout[6], layout[7], r, ff / 32),
                    down[row * ff..(row + 1) * ff],
                    "layer {l} block {rank} down row {row}"
                );
            }
            // Padding rows (tiles of 16): zero scales and minimums, so zero values.
            for (stage, rows, kbs) in [(0, r_qkv, h / 32), (2, r_o, h / 32), (4, r_gu, h / 32), (6, r_d, ff / 32)] {
                for r in rows..shape.stored(rows) {
                    assert!(
                        share_row(share, layout[stage], layout[stage + 1], r, kbs).iter().all(|&v| v == 0.0),
                        "layer {l} block {rank} stage {stage} padding row {r}"
                    );
                }
            }
            let norm = |at: usize| {
                (0..h).map(|i| f32::from_le_bytes(share[at + 4 * i..][..4].try_into().unwrap())).collect::<Vec<_>>()
            };
            assert_eq!(norm(layout[8]), f32s("attn_norm"));
            assert_eq!(norm(layout[9]), f32s("ffn_norm"));
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
        super::super::OneLaunchDecoder::new(&file, &fuse::Device::Cpu).err().expect("refused on the CPU").to_string();
    assert!(err.contains("runs on a GPU"), "{err}");
}

#[test]
fn random_weights_have_the_layout_and_plausible_values() {
    let config = Config::smollm2_135m();
    let w = DecodeStepWeights::random(&config, 3).unwrap();
    let shape = w.shape;
    assert_eq!(w.shares.len(), shape.layers * STEP_SHARES * shape.share_bytes());
    assert_eq!((w.head_q.len(), w.head_d.len(), w.out_norm.len()), (49152 * 576, 49152 * 18, 576));
    let layout = shape.share_layout();
    let share = &w.shares[5 * shape.share_bytes()..][..shape.share_bytes()];
    // A gate/up row: scales in (0.004, 0.012), minimums -7.5 scales, so values within about +-0.1.
    let row = share_row(share, layout[4], layout[5], 7, 18);
    assert!(row.iter().all(|v| v.abs() < 0.1) && row.iter().any(|v| v.abs() > 0.01), "{row:?}");
    let norm = f32::from_le_bytes(share[layout[9]..][..4].try_into().unwrap());
    assert!((0.9..1.1).contains(&norm), "{norm}");
    assert!(w.head_q.iter().all(|&q| q >= 1), "Q8_0 values -127..127");
    assert_ne!(DecodeStepWeights::random(&config, 4).unwrap().shares[..64], w.shares[..64], "the seed matters");
}
