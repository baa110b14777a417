//! Parsing the GGUF layout: header, metadata, tensor infos, then the aligned data section; every tensor is
//! checked to lie inside the file here, so later accesses cannot go out of bounds.

use std::collections::HashMap;
use std::path::Path;

use super::cursor::Cursor;
use super::value::MetaValue;
use super::TensorInfo;
use crate::error::Result;
use crate::ggml_type::GgmlType;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;

pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub metadata_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<Parsed> {
    let mut cur = Cursor::new(bytes, path);
    let magic = cur.take(4, "magic")?;
    if magic != MAGIC {
        return Err(cur.error_at(0, format!("bad magic {magic:02x?}: not a GGUF file (expected \"GGUF\")")));
    }
    let version = read_version(&mut cur)?;
    let tensor_count = cur.len("tensor count")?;
    let kv_count = cur.len("metadata count")?;
    // Each entry takes several bytes, so a count above the bytes left is corrupt (and must not size a Vec).
    for (count, what) in [(tensor_count, "tensor count"), (kv_count, "metadata count")] {
        if count > cur.remaining() {
            return Err(cur.error(format!("{what} {count} cannot fit in the {} bytes left", cur.remaining())));
        }
    }

    let mut metadata = Vec::with_capacity(kv_count);
    let mut metadata_index = HashMap::with_capacity(kv_count);
    let mut metadata_offsets = Vec::with_capacity(kv_count);
    for _ in 0..kv_count {
        let at = cur.position();
        metadata_offsets.push(at);
        let key = cur.string("metadata key")?;
        let value = MetaValue::read(&mut cur, &key)?;
        if metadata_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(cur.error_at(at, format!("metadata key `{key}` appears twice")));
        }
        metadata.push((key, value));
    }
    let alignment = read_alignment(&metadata, &metadata_index, &metadata_offsets, &cur)?;

    let mut tensors = Vec::with_capacity(tensor_count);
    let mut tensor_index = HashMap::with_capacity(tensor_count);
    let mut info_offsets = Vec::with_capacity(tensor_count);
    for _ in 0..tensor_count {
        let at = cur.position();
        let info = read_tensor_info(&mut cur)?;
        if tensor_index.insert(info.name.clone(), tensors.len()).is_some() {
            return Err(cur.error_at(at, format!("tensor `{}` appears twice", info.name)));
        }
        tensors.push(info);
        info_offsets.push(at);
    }

    let data_offset = align_up(cur.position() as u64, alignment);
    for (info, &at) in tensors.iter().zip(&info_offsets) {
        check_tensor_bounds(info, data_offset, alignment, bytes.len() as u64, &cur, at)?;
    }
    check_no_overlaps(&tensors, &info_offsets, &cur)?;
    Ok(Parsed { version, metadata, metadata_index, tensors, tensor_index, alignment, data_offset })
}

fn read_version(cur: &mut Cursor<'_>) -> Result<u32> {
    let at = cur.position();
    let version = cur.u32("version")?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(cur.error_at(at, "GGUF version 1 is not supported (only versions 2 and 3 are)")),
        v if matches!(v.swap_bytes(), 1..=3) => {
            Err(cur.error_at(at, "big-endian GGUF file: only little-endian files are supported"))
        }
        v => Err(cur.error_at(at, format!("unknown GGUF version {v} (versions 2 and 3 are supported)"))),
    }
}

fn read_alignment(
    metadata: &[(String, MetaValue)],
    index: &HashMap<String, usize>,
    offsets: &[usize],
    cur: &Cursor<'_>,
) -> Result<u64> {
    let Some(&i) = index.get("general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = &metadata[i].1;
    match value.as_i128() {
        Some(a) if a > 0 && (a as u64).is_power_of_two() && a <= u32::MAX as i128 => Ok(a as u64),
        _ => Err(cur.error_at(offsets[i], format!("general.alignment must be a power of two, found {value:?}"))),
    }
}

fn read_tensor_info(cur: &mut Cursor<'_>) -> Result<TensorInfo> {
    let name = cur.string("tensor name")?;
    let dims_at = cur.position();
    let n_dims = cur.u32("tensor dimension count")?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(cur.error_at(dims_at, format!("tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64("tensor dimension")?);
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| cur.error_at(dims_at, format!("tensor `{name}` dimensions {dims:?} overflow")))?;
    let ggml_type = GgmlType::from_id(cur.u32("tensor type")?);
    let offset = cur.u64("tensor offset")?;
    Ok(TensorInfo { name, dims, ggml_type, offset, n_elements })
}

fn check_tensor_bounds(
    info: &TensorInfo,
    data_offset: u64,
    alignment: u64,
    file_len: u64,
    cur: &Cursor<'_>,
    info_at: usize,
) -> Result<()> {
    let name = &info.name;
    if !info.offset.is_multiple_of(alignment) {
        return Err(cur.error_at(
            info_at,
            format!("tensor `{name}` offset {} is not a multiple of the alignment {alignment}", info.offset),
        ));
    }
    // A type without a known layout cannot be bounds-checked; reading its bytes is refused later instead.
    let Some((block_len, _)) = info.ggml_type.block_layout() else {
        return Ok(());
    };
    let Some(len) = info.ggml_type.bytes_for(info.n_elements) else {
        return Err(cur.error_at(
            info_at,
            format!(
                "tensor `{name}` has {} elements, not a multiple of {}'s block of {block_len}",
                info.n_elements, info.ggml_type
            ),
        ));
    };
    let start = data_offset.checked_add(info.offset);
    match start.and_then(|s| s.checked_add(len)) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(cur.error_at(info_at, format!(
            "tensor `{name}` ({len} bytes at data offset {}) runs past the end of the file ({file_len} bytes, data from byte {data_offset})",
            info.offset
        ))),
    }
}

/// No two tensors share a byte of the data section: an offset moved into another tensor's bytes, or a type id
/// changed to a larger type, would otherwise read another tensor's data as this one's without a word.
fn check_no_overlaps(tensors: &[TensorInfo], info_offsets: &[usize], cur: &Cursor<'_>) -> Result<()> {
    // (start, end, index) of every tensor of a known layout (bounds-checked above, so the ends do not overflow).
    let mut extents: Vec<(u64, u64, usize)> = tensors
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((t.offset, t.offset + t.ggml_type.bytes_for(t.n_elements)?, i)))
        .filter(|&(start, end, _)| end > start)
        .collect();
    extents.sort_unstable();
    for pair in extents.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            let (first, second) = (&tensors[a], &tensors[b]);
            return Err(cur.error_at(
                info_offsets[b],
                format!(
                "tensor `{}` (data offset {}) starts inside tensor `{}` (data offsets {} to {end}, {} of {} elements)",
                second.name, second.offset, first.name, first.offset, first.ggml_type, first.n_elements
            ),
            ));
        }
    }
    Ok(())
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}
