//! Each type's decoder against gguf-py's dequantizer (`tests/data/quant_blocks.bin`, written by
//! `scripts/quant-fixture.py`), and the helpers' contracts.

use super::*;

/// The fixture's entries: (type, blocks' bytes, gguf-py's values).
fn fixture() -> Vec<(DType, Vec<u8>, Vec<f32>)> {
    let file = include_bytes!("../../tests/data/quant_blocks.bin");
    assert_eq!(&file[..8], b"FUSEQ1\0\0", "the fixture's magic");
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
    let (count, mut at) = (u32_at(8), 12);
    let mut entries = Vec::new();
    for _ in 0..count {
        let name = std::str::from_utf8(&file[at..at + 8]).unwrap().trim_end_matches('\0');
        let dtype = DType::parse(name).unwrap_or_else(|| panic!("fixture type {name}"));
        let b = dtype.block().unwrap();
        let blocks = u32_at(at + 8);
        at += 12;
        let bytes = file[at..at + blocks * b.bytes].to_vec();
        at += blocks * b.bytes;
        let values = file[at..at + 4 * blocks * b.elements]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 4 * blocks * b.elements;
        entries.push((dtype, bytes, values));
    }
    assert_eq!(at, file.len(), "the fixture ends after its last entry");
    entries
}

#[test]
fn every_block_type_decodes_as_gguf_py_does() {
    let entries = fixture();
    let types: Vec<DType> = entries.iter().map(|e| e.0).collect();
    assert_eq!(types, DType::QUANTIZED, "the fixture covers every block type, in order");
    for (dtype, bytes, expected) in entries {
        let got = dequantize_to_vec(dtype, &bytes).unwrap();
        assert_eq!(got.len(), expected.len(), "{dtype}");
        assert!(expected.iter().any(|&v| v != 0.0), "{dtype}: the reference is not all zeros");
        for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
            // ggml's order of f32 operations: the same values, up to the last bit of a product's rounding.
            assert!((g - e).abs() <= 1e-6 * e.abs().max(1e-3), "{dtype} value {i}: {g} (gguf-py: {e})");
        }
        for i in [0, 1, expected.len() / 2, expected.len() - 1] {
            assert_eq!(dequantize_element(dtype, &bytes, i), got[i], "{dtype} element {i}");
        }
    }
}

#[test]
fn f16_scales_decode_exactly() {
    use blocks::f16_to_f32;
    for (bits, value) in [(0x3c00, 1.0), (0xc000, -2.0), (0x0001, 5.960_464_5e-8), (0x8000, -0.0), (0x7bff, 65504.0)] {
        assert_eq!(f16_to_f32(bits), value, "{bits:#06x}");
        assert_eq!(f16_to_f32(bits).is_sign_negative(), bits & 0x8000 != 0, "{bits:#06x} sign");
    }
    assert!(f16_to_f32(0x7c00).is_infinite() && f16_to_f32(0x7e00).is_nan());
    assert_eq!(f16_to_f32(0x03ff), 1023.0 / 16_777_216.0, "the largest subnormal");
}

#[test]
fn partial_blocks_and_element_types_are_refused_with_the_sizes() {
    let err = dequantize(DType::Q4_K, &[0; 143], &mut [0.0; 256]).unwrap_err();
    assert!(err.0.contains("143 bytes of Q4_K") && err.0.contains("144 bytes"), "{err}");
    let err = dequantize(DType::Q8_0, &[0; 34], &mut [0.0; 31]).unwrap_err();
    assert!(err.0.contains("31 values"), "{err}");
    assert!(dequantize(DType::F32, &[], &mut []).unwrap_err().0.contains("f32 is not a block-quantized type"));
}

#[test]
fn random_blocks_are_seeded_finite_and_use_every_scale_field() {
    for dtype in DType::QUANTIZED {
        let bytes = random_blocks(dtype, 5, 7);
        assert_eq!(bytes, random_blocks(dtype, 5, 7), "{dtype}: seeded");
        assert_ne!(bytes, random_blocks(dtype, 5, 8), "{dtype}: the seed matters");
        let values = dequantize_to_vec(dtype, &bytes).unwrap();
        assert!(values.iter().all(|v| v.is_finite() && v.abs() < 10.0), "{dtype}: finite, weight-sized");
        assert!(values.iter().filter(|&&v| v != 0.0).count() > values.len() / 2, "{dtype}: mostly non-zero");
    }
}

#[test]
fn block_types_have_gguf_names_and_sizes() {
    for dtype in DType::QUANTIZED {
        assert_eq!(DType::parse(dtype.name()), Some(dtype));
        assert_eq!(DType::parse(&dtype.name().to_ascii_lowercase()), Some(dtype));
        assert!(dtype.is_quantized() && !dtype.is_float());
        let b = dtype.block().unwrap();
        assert_eq!(dtype.storage_bytes(3 * b.elements), Some(3 * b.bytes));
        assert_eq!(dtype.storage_bytes(3 * b.elements + 1), None, "{dtype}: a partial block");
    }
    assert_eq!((DType::Q4_K.name(), DType::Q8_0.to_string()), ("Q4_K", "Q8_0".to_string()));
    assert_eq!(DType::BF16.storage_bytes(3), Some(6));
    assert!(DType::F32.block().is_none() && DType::parse("q3_k").is_none());
}
