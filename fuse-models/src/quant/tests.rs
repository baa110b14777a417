//! Blocks built by hand (bytes -> expected values), length checks, and the real model's tensors when present.

use super::*;

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// A Q4_1 block: scale 0.5, min -1, nibbles j for low halves and 15 - j for high halves.
fn q4_1_block() -> (Vec<u8>, Vec<f32>) {
    let mut bytes = [f16_bytes(0.5), f16_bytes(-1.0)].concat();
    bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let mut expected: Vec<f32> = (0..16).map(|j| j as f32 * 0.5 - 1.0).collect();
    expected.extend((0..16).map(|j| (15 - j) as f32 * 0.5 - 1.0));
    (bytes, expected)
}

#[test]
fn q4_1_block_by_hand() {
    let (bytes, expected) = q4_1_block();
    assert_eq!(bytes.len(), 20);
    assert_eq!(dequantize_f32(GgmlType::Q4_1, &bytes, 32).unwrap(), expected);
    assert_eq!(expected[0], -1.0);
    assert_eq!(expected[16], 6.5);
}

#[test]
fn q8_0_block_by_hand() {
    let mut bytes = f16_bytes(0.25).to_vec();
    let qs: Vec<i8> = (0..32).map(|j: i32| (j * 8 - 128) as i8).collect(); // -128 ..= 120
    bytes.extend(qs.iter().map(|&q| q as u8));
    let expected: Vec<f32> = qs.iter().map(|&q| q as f32 * 0.25).collect();
    assert_eq!(dequantize_f32(GgmlType::Q8_0, &bytes, 32).unwrap(), expected);
    assert_eq!(expected[0], -32.0);
}

#[test]
fn q4_0_block_by_hand() {
    let mut bytes = f16_bytes(2.0).to_vec();
    bytes.extend((0..16u8).map(|j| j | (j << 4)));
    let values = dequantize_f32(GgmlType::Q4_0, &bytes, 32).unwrap();
    assert_eq!(values[0], -16.0);
    assert_eq!(values[15], 14.0);
    assert_eq!(values[31], 14.0);
}

#[test]
fn scalar_types() {
    let f32s: Vec<u8> = [1.5f32, -2.0, 3.25].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequantize_f32(GgmlType::F32, &f32s, 3).unwrap(), vec![1.5, -2.0, 3.25]);
    let f16s = [0x00u8, 0x3c, 0x00, 0xc0]; // 1.0, -2.0
    assert_eq!(dequantize_f32(GgmlType::F16, &f16s, 2).unwrap(), vec![1.0, -2.0]);
    let bf16s = [0x80u8, 0x3f, 0x40, 0xc0]; // 1.0, -3.0
    assert_eq!(dequantize_f32(GgmlType::BF16, &bf16s, 2).unwrap(), vec![1.0, -3.0]);
}

#[test]
fn many_blocks_across_chunks_match_block_by_block() {
    // 300 blocks span several parallel chunks; each block gets its own scale so misplaced chunks show.
    let blocks = 300;
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for b in 0..blocks {
        let (mut block, values) = q4_1_block();
        let scale = 1.0 + b as f32;
        block[..2].copy_from_slice(&f16_bytes(scale));
        expected.extend((0..32).map(|j| (values[j] + 1.0) / 0.5 * scale - 1.0));
        bytes.extend(block);
    }
    let got = dequantize_f32(GgmlType::Q4_1, &bytes, blocks * 32).unwrap();
    assert_eq!(got, expected);
    let got_bf16 = dequantize_bf16(GgmlType::Q4_1, &bytes, blocks * 32).unwrap();
    for (b, e) in got_bf16.iter().zip(&expected) {
        assert_eq!(*b, bf16::from_f32(*e));
    }
}

#[test]
fn lengths_and_types_are_checked() {
    let (bytes, _) = q4_1_block();
    let partial = dequantize_f32(GgmlType::Q4_1, &bytes, 31).unwrap_err().to_string();
    assert!(partial.contains("31 elements is not a whole number of blocks of 32"), "{partial}");
    let short = dequantize_f32(GgmlType::Q4_1, &bytes[..19], 32).unwrap_err().to_string();
    assert!(short.contains("take 20 bytes, got 19"), "{short}");
    let unsupported = dequantize_f32(GgmlType::Q2_K, &[0; 84], 256).unwrap_err().to_string();
    assert!(unsupported.contains("Q2_K is not supported") && unsupported.contains("Q6_K"), "{unsupported}");
    // The K types are read (by fuse's decoder, which `fuse::ir::quant` checks against gguf-py).
    let q6k = fuse::ir::quant::random_blocks(fuse::DType::Q6_K, 2, 3);
    let want = fuse::ir::quant::dequantize_to_vec(fuse::DType::Q6_K, &q6k).unwrap();
    assert_eq!(dequantize_f32(GgmlType::Q6_K, &q6k, 512).unwrap(), want);
    assert!(dequantize_bf16(GgmlType::Other(16), &[], 0).is_err());
}
