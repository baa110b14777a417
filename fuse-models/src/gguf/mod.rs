//! Reading GGUF files (versions 2 and 3): header, metadata of every value type, tensor infos, and each tensor's
//! bytes by name, with typed metadata getters. The file is memory-mapped ([`GgufFile::open`]) or read into
//! huge pages ([`GgufFile::read`], faster for the CPU's products): tensors are borrowed, not copied.
//!
//! No crate fitted: the GGUF parsers on crates.io are small single-author crates without structured errors or
//! bounds checks, and candle-core's reader comes with the whole framework. The format is simple enough that
//! this module is short.

mod cursor;
mod getters;
pub(crate) mod image;
mod parse;
mod value;

use std::collections::HashMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use value::MetaValue;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// One tensor's entry in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml's order: `dims[0]` varies fastest (for a matrix, the length of a row).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: u64,
    pub n_elements: u64,
}

impl TensorInfo {
    /// Dimensions in row-major order, outermost first (as PyTorch and `[rows, cols]` name them): ggml's
    /// `[576, 1536]` for `ffn_gate` is the `[1536, 576]` matrix of 1536 rows.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Owned(bytes) => bytes,
        }
    }
}

/// A parsed GGUF file. Opening it checks the whole layout, so every later access is in bounds.
pub struct GgufFile {
    path: PathBuf,
    /// Shared with the tensors made from it as stored (`tensor`), which read it in place.
    storage: Arc<Storage>,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    metadata_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

/// The file at `path`; a directory is an error that says so (mapping one failed with "No such device").
fn open_file(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(std::io::Error::other("a directory, not a GGUF file"));
    }
    Ok(file)
}

impl GgufFile {
    /// Opens and parses the file at `path` (memory-mapped).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let io_error = |source| Error::Io { path: path.clone(), source };
        let file = open_file(&path).map_err(io_error)?;
        // SAFETY: the map is read-only and private to this value. As with any memory-mapped file, another
        // process truncating the file while it is mapped is outside what Rust can guard against; model files
        // are not rewritten in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_error)?;
        Self::from_storage(Storage::Mapped(map), path)
    }

    /// Reads the whole file at `path` into memory of this process, on 2 MiB pages where the OS gives them
    /// (Linux's transparent huge pages, asked for with `madvise`), and parses it. Tensors then read that memory
    /// in place, as they read the mapping after [`GgufFile::open`]; resident bytes are the same.
    ///
    /// Why: the CPU's products stream every weight each token, and a mapped file is on 4 KiB pages, a TLB miss
    /// every 4 KiB, a slow one in a virtual machine (a two-level page walk): llama-3.2-1b Q4_K_M decodes in
    /// 48 ms a token from the mapping and 34 ms from huge pages (2 threads, a KVM guest). The cost is the read
    /// at load (the whole file, and the first touch of that much fresh memory: 2.6-2.9 s for that 800 MB file
    /// on the same guest, where the mapping is instant) and memory that is the process's own, not the page
    /// cache's to share. [`GgufFile::open_for`] picks this for the CPU and the mapping for a GPU (which reads
    /// the host copy once, at upload).
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let io_error = |source| Error::Io { path: path.clone(), source };
        let mut file = open_file(&path).map_err(io_error)?;
        let len = file.metadata().map_err(io_error)?.len();
        let len = usize::try_from(len).map_err(|_| io_error(std::io::Error::other("larger than the address space")))?;
        if len == 0 {
            return Self::from_storage(Storage::Owned(Vec::new()), path);
        }
        let mut memory = memmap2::MmapMut::map_anon(len).map_err(io_error)?;
        // A hint: where the OS has no huge pages (or refuses), the memory is on small pages and works the same.
        #[cfg(target_os = "linux")]
        let _ = memory.advise(memmap2::Advice::HugePage);
        read_into(&mut file, &mut memory, READ_STRETCH).map_err(io_error)?;
        Self::from_storage(Storage::Mapped(memory.make_read_only().map_err(io_error)?), path)
    }

    /// [`GgufFile::read`] where `device` is the CPU (whose products stream the weights from this memory every
    /// token) on Linux and the file fits in the memory the OS reports available (`MemAvailable`, less a tenth),
    /// [`GgufFile::open`] otherwise: a GPU reads the host copy once, when its tensors are uploaded; a file that
    /// does not fit would push other memory out (or the process, the OOM killer) where a mapping pages.
    pub fn open_for(path: impl AsRef<Path>, device: &fuse::Device) -> Result<GgufFile> {
        let path = path.as_ref();
        let fits = || {
            let len = std::fs::metadata(path).map(|m| m.len()).ok()?;
            Some(len <= available_memory()? / 10 * 9)
        };
        match device {
            fuse::Device::Cpu if cfg!(target_os = "linux") && fits() == Some(true) => Self::read(path),
            _ => Self::open(path),
        }
    }

    /// Parses a GGUF image held in memory; `name` stands for the file in error messages.
    pub fn from_bytes(bytes: Vec<u8>, name: impl Into<PathBuf>) -> Result<GgufFile> {
        Self::from_storage(Storage::Owned(bytes), name.into())
    }

    fn from_storage(storage: Storage, path: PathBuf) -> Result<GgufFile> {
        let parsed = parse::parse(&storage, &path)?;
        Ok(GgufFile {
            path,
            storage: Arc::new(storage),
            version: parsed.version,
            metadata: parsed.metadata,
            metadata_index: parsed.metadata_index,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn version(&self) -> u32 {
        self.version
    }
    /// The data section's alignment (`general.alignment`, 32 when absent).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Byte offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every tensor's entry, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry of the tensor called `name`.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::MissingTensor { path: self.path.clone(), name: name.to_string() })
    }

    /// The raw (still quantised) bytes of the tensor called `name`, borrowed from the file.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor_info(name)?;
        let len = info.ggml_type.bytes_for(info.n_elements).ok_or_else(|| Error::UnsupportedType {
            type_name: info.ggml_type.to_string(),
            what: "its block size is unknown, so tensor bytes cannot be located",
        })?;
        // In bounds: `parse` checked every tensor of a known type against the file length.
        let start = (self.data_offset + info.offset) as usize;
        Ok(&self.storage[start..start + len as usize])
    }

    /// The tensor called `name` as the file stores it, of [`TensorInfo::shape`], on `device`: block types as
    /// fuse's block-quantized dtype of the same name, read in place on the CPU from the mapping or the memory
    /// [`GgufFile::read`] filled (no copy; the tensor keeps it alive) and uploaded once to a GPU; F32, F16 and
    /// BF16 as themselves.
    pub fn tensor(&self, name: &str, device: &fuse::Device) -> Result<fuse::Tensor> {
        let info = self.tensor_info(name)?;
        let shape = info.shape();
        let bytes = self.tensor_bytes(name)?;
        let start = (self.data_offset + info.offset) as usize;
        let tensor = match info.ggml_type {
            GgmlType::F32 => fuse::Tensor::from_vec(
                crate::quant::dequantize_f32(GgmlType::F32, bytes, bytes.len() / 4)?,
                &shape,
                device,
            ),
            GgmlType::F16 => fuse::Tensor::from_vec(
                bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(),
                &shape,
                device,
            ),
            GgmlType::BF16 => fuse::Tensor::from_vec(
                bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(),
                &shape,
                device,
            ),
            ty => match ty.block_dtype() {
                Some(dtype) => {
                    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.storage.clone();
                    fuse::Tensor::from_shared_blocks(dtype, &shape, owner, start..start + bytes.len(), device)
                }
                None => {
                    return Err(Error::UnsupportedType {
                        type_name: ty.to_string(),
                        what: "fuse reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K",
                    })
                }
            },
        };
        Ok(tensor?)
    }

    /// The tensor called `name` dequantised to f32, in row-major order of [`TensorInfo::shape`].
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor_info(name)?;
        crate::quant::dequantize_f32(info.ggml_type, self.tensor_bytes(name)?, info.n_elements as usize)
    }

    /// The tensor called `name` dequantised to bf16, in row-major order of [`TensorInfo::shape`].
    pub fn tensor_bf16(&self, name: &str) -> Result<Vec<half::bf16>> {
        let info = self.tensor_info(name)?;
        crate::quant::dequantize_bf16(info.ggml_type, self.tensor_bytes(name)?, info.n_elements as usize)
    }
}

/// The least a thread of [`read_into`] reads.
const READ_STRETCH: usize = 64 << 20;

/// Fills `memory` with the file's bytes from its start: on Unix in stretches of at least `least` bytes (whole
/// 2 MiB pages where `least` is that large) read by up to 8 threads at their offsets, as each thread's first
/// touches of fresh memory are what such a read waits on (the OS zeroing, and in a virtual machine the host
/// backing, each new page: 800 MB on 2 MiB pages took 5.9 s from one thread and 3.0 s from two on this
/// project's 2-vCPU VM, 0.1 s once the memory was backed).
fn read_into(file: &mut std::fs::File, memory: &mut [u8], least: usize) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (memory.len() / least.max(1)).clamp(1, cores.min(8));
        let stretch = memory.len().div_ceil(threads).next_multiple_of(least.clamp(1, 2 << 20));
        let file = &*file;
        return std::thread::scope(|s| {
            let reads: Vec<_> = memory
                .chunks_mut(stretch)
                .enumerate()
                .map(|(i, part)| s.spawn(move || file.read_exact_at(part, (i * stretch) as u64)))
                .collect();
            reads
                .into_iter()
                .try_for_each(|r| r.join().unwrap_or_else(|_| Err(std::io::Error::other("a read panicked"))))
        });
    }
    #[cfg(not(unix))]
    {
        use std::io::Read;
        let _ = least;
        file.read_exact(memory)
    }
}

/// The bytes of memory Linux reports available for new allocations (`MemAvailable` of /proc/meminfo).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
pub(crate) mod tests;
