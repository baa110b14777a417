//! ggml's tensor element types: their ids in a GGUF file and their block layout (elements per block, bytes per
//! block). Knowing the size of every common type lets the reader bounds-check any file; which of them can be
//! dequantised is `quant`'s business.

use std::fmt;

/// A ggml element type, as stored in a GGUF tensor info.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// A type id this crate has no layout for (newer quantisations such as the IQ family).
    Other(u32),
}

impl GgmlType {
    /// The type with ggml's numeric id `id` (`Other(id)` for ids without a known layout).
    pub fn from_id(id: u32) -> GgmlType {
        use GgmlType::*;
        match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            other => Other(other),
        }
    }

    /// `(elements per block, bytes per block)`, `None` for `Other`. Sizes follow ggml's block structs.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        use GgmlType::*;
        Some(match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 2 + 16),
            Q4_1 => (32, 2 + 2 + 16),
            Q5_0 => (32, 2 + 4 + 16),
            Q5_1 => (32, 2 + 2 + 4 + 16),
            Q8_0 => (32, 2 + 32),
            Q8_1 => (32, 2 + 2 + 32),
            Q2_K => (256, 16 + 64 + 2 + 2),
            Q3_K => (256, 32 + 64 + 12 + 2),
            Q4_K => (256, 2 + 2 + 12 + 128),
            Q5_K => (256, 2 + 2 + 12 + 32 + 128),
            Q6_K => (256, 128 + 64 + 16 + 2),
            Q8_K => (256, 4 + 256 + 32),
            Other(_) => return None,
        })
    }

    /// fuse's block-quantized dtype of the same name and layout (`Q4_0` .. `Q6_K`), `None` for other types.
    pub fn block_dtype(self) -> Option<fuse::DType> {
        use fuse::DType as D;
        Some(match self {
            GgmlType::Q4_0 => D::Q4_0,
            GgmlType::Q4_1 => D::Q4_1,
            GgmlType::Q5_0 => D::Q5_0,
            GgmlType::Q5_1 => D::Q5_1,
            GgmlType::Q8_0 => D::Q8_0,
            GgmlType::Q4_K => D::Q4_K,
            GgmlType::Q5_K => D::Q5_K,
            GgmlType::Q6_K => D::Q6_K,
            _ => return None,
        })
    }

    /// Bytes that `n_elements` of this type take, or `None` when the layout is unknown or `n_elements` is not a
    /// whole number of blocks.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let (block_len, block_bytes) = self.block_layout()?;
        if !n_elements.is_multiple_of(block_len as u64) {
            return None;
        }
        (n_elements / block_len as u64).checked_mul(block_bytes as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgmlType::Other(id) => write!(f, "ggml type id {id}"),
            known => write!(f, "{known:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_sizes_of_the_types_smollm2_uses() {
        assert_eq!(GgmlType::from_id(0), GgmlType::F32);
        assert_eq!(GgmlType::from_id(3), GgmlType::Q4_1);
        assert_eq!(GgmlType::from_id(8), GgmlType::Q8_0);
        assert_eq!(GgmlType::from_id(30), GgmlType::BF16);
        assert_eq!(GgmlType::from_id(16), GgmlType::Other(16));
        assert_eq!(GgmlType::Q4_1.bytes_for(64), Some(40));
        assert_eq!(GgmlType::Q8_0.bytes_for(576 * 49152), Some(576 / 32 * 34 * 49152));
        assert_eq!(GgmlType::Q4_1.bytes_for(33), None);
        assert_eq!(GgmlType::Other(16).bytes_for(256), None);
        assert_eq!(GgmlType::Other(16).to_string(), "ggml type id 16");
        assert_eq!(GgmlType::Q4_1.to_string(), "Q4_1");
    }

    #[test]
    fn block_types_are_fuses_with_the_same_name_and_layout() {
        for id in 0..40 {
            let ty = GgmlType::from_id(id);
            if let Some(d) = ty.block_dtype() {
                let b = d.block().unwrap();
                assert_eq!(ty.block_layout(), Some((b.elements, b.bytes)), "{ty}");
                assert_eq!(ty.to_string(), d.name());
            }
        }
        assert_eq!(
            fuse::DType::QUANTIZED.len(),
            (0..40).filter(|&i| GgmlType::from_id(i).block_dtype().is_some()).count()
        );
        assert!(GgmlType::Q2_K.block_dtype().is_none() && GgmlType::F16.block_dtype().is_none());
    }
}
