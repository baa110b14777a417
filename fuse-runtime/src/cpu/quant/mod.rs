//! Matrix products of f32 activations with block-quantized weights (GGUF / ggml's Q4_0 ... Q6_K), on the CPU.
//!
//! `out = x · Wᵀ`: x is m x k f32 (row-major), W is n rows of k values each stored as `k / elements` blocks, the
//! layout GGUF gives a weight matrix (`ne0 = k`). Three strategies:
//! - [`Strategy::F32`]: each weight block is decoded to f32 in registers and FMA'd with x; the result is the
//!   reference (`fuse_ir::quant::dequantize`) product up to f32 summation order.
//! - [`Strategy::Q8Residual`]: [`Strategy::Q8`] with x as two 8-bit terms (the second quantizing the first's
//!   rounding error), each a row for the same kernels: the K types' default.
//! - [`Strategy::Q8`]: each row of x is first quantized to 8 bits (blocks of 32 like Q8_0 for the 32-element types,
//!   blocks of 256 with per-16 sums like Q8_K for the K types), then integer dot products (`maddubs` / `madd`) with
//!   the scales applied in f32 once a block, as llama.cpp does; about 4e-3 relative error from x's rounding.
//!
//! Kernels take the rows of W of a tile and up to [`MR`] rows of x ([`MR_WIDE`] on AVX-512): a block is decoded
//! once and used for all of them (the f32 kernels at m = 1 take two rows of W at a time instead, sharing the
//! loads of x). Work is split with
//! rayon over tiles of [`NR`] rows of W (and of [`MC`] rows of x when m is large); the tiles do not depend on the
//! thread count and each output's arithmetic does not depend on its tile nor on the rows computed with it, so
//! results are bit-identical whatever the number of threads.

mod q8;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_amx;
#[cfg(target_arch = "x86_64")]
mod x86_amx32;
#[cfg(target_arch = "x86_64")]
mod x86_amx_k;
#[cfg(target_arch = "x86_64")]
mod x86_amx_panel;
#[cfg(target_arch = "x86_64")]
mod x86_f32;
#[cfg(target_arch = "x86_64")]
mod x86_f32_512;
#[cfg(target_arch = "x86_64")]
mod x86_q32_vnni;
#[cfg(target_arch = "x86_64")]
mod x86_q4k_tile;
#[cfg(target_arch = "x86_64")]
mod x86_q8;
#[cfg(target_arch = "x86_64")]
mod x86_q8_512;
#[cfg(target_arch = "x86_64")]
mod x86_quantize;

#[cfg(test)]
mod tests;

use fuse_ir::DType;
use q8::{Q8Acts, Q8Row};

/// Rows of W a task.
const NR: usize = 16;
/// Rows of x a kernel call (each block decoded once for these).
const MR: usize = 4;
/// Rows of x a call of the AVX-512 kernels takes (the f32 strategy's, and the K types' under [`Strategy::Q8`]):
/// a block decoded once for 8 at prefill (128 tokens, 2 threads: llama-3.2-1b Q4_K_M 91 -> 102 tokens/s,
/// SmolLM2 Q4_1 ~303 -> ~321 against 4, three runs each alternated).
const MR_WIDE: usize = 8;
/// Tasks a thread (at least): enough to even out uneven threads, few enough for long runs of memory.
const TASKS_PER_THREAD: usize = 2;
/// Rows of x a task when m > 16.
const MC: usize = 64;

/// Rows of x from which the K types' products take one 8-bit term, not two (see [`Strategy::default_for`]):
/// a prompt's prefill, not a decode step of up to 31 sequences.
pub const Q8_MIN_ROWS: usize = 32;

/// An instruction set to run the kernels with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust (the fallback, and the reference the SIMD kernels are tested against).
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 (F, BW, VL) with AVX2 + FMA + F16C: the f32 strategy 16 lanes wide, the 8-bit strategy's
    /// K-type kernels 64 bytes wide (its other types run their AVX2 kernels).
    Avx512,
    /// [`Isa::Avx512`] with AVX-512 VNNI: the 8-bit strategy's K-type kernels by `vpdpbusd` / `vpdpwssd`, and the
    /// two-term strategy's 32-value types on 16-bit integers (`x86_q32_vnni`).
    Avx512Vnni,
    /// [`Isa::Avx512Vnni`] with AMX (tiles and 8-bit products, granted by the OS): the one-term strategy's Q4_K,
    /// Q5_K and Q6_K products at any number of rows, and the two-term strategy's Q4_0, Q4_1 and Q8_0 products
    /// from [`Q8_MIN_ROWS`] rows (below, a tile of 16 rows would be mostly empty: `x86_q32_vnni` takes them), on
    /// tiles (`x86_amx`); everything else as [`Isa::Avx512Vnni`]. A row's result does not depend on the rows
    /// beside it among fewer than [`Q8_MIN_ROWS`] nor among more.
    Amx,
}

impl Isa {
    #[cfg(test)]
    pub const ALL: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx];

    /// Whether this CPU runs `self`.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Amx => Isa::Avx512Vnni.available() && x86_amx::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => false,
        }
    }

    /// The best instruction set this CPU runs.
    pub fn detect() -> Isa {
        if Isa::Amx.available() {
            Isa::Amx
        } else if Isa::Avx512Vnni.available() {
            Isa::Avx512Vnni
        } else if Isa::Avx512.available() {
            Isa::Avx512
        } else if Isa::Avx2.available() {
            Isa::Avx2
        } else {
            Isa::Scalar
        }
    }
}

/// How the activations meet the weights (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    F32,
    Q8,
    /// [`Strategy::Q8`] with each row of x as two 8-bit terms, `x = d1 q1 + d2 q2` (the second quantizing what
    /// the first's rounding left): twice the integer products on one decoding of the weights, about 1e-5 of
    /// each block's largest value off instead of 4e-3.
    Q8Residual,
}

impl Strategy {
    /// The strategy [`matmul_quantized`] uses (`FUSE_CPU_QUANT=f32|q8|q8r` chooses another): for the K types
    /// [`Strategy::Q8Residual`] up to [`Q8_MIN_ROWS`] rows (decode), whose integer products are ~2x faster than
    /// decoding the blocks to f32 (the K types' scales make the f32 path compute-bound: llama-3.2-1b Q4_K_M, 2
    /// threads, 114 -> 54 ms a token) and within ~1e-5 of exact (SmolLM2's logits 5e-5 .. 7e-4 from
    /// transformers'); from [`Q8_MIN_ROWS`] rows (prefill) [`Strategy::Q8`], llama.cpp's choice (one 8-bit
    /// term, ~4e-3 a product, 2.6e-2 off on SmolLM2's logits over its 30 layers where every product took it),
    /// half the integer products (prefill of 128 tokens, llama-3.2-1b Q4_K_M, 2 threads: 49 -> 102 tokens/s
    /// with [`MR_WIDE`]); for the 32-value types [`Strategy::Q8Residual`] where AVX-512 VNNI or AMX runs it
    /// (`x86_q32_vnni` below [`Q8_MIN_ROWS`] rows: Q4_1 at 1 row, 2 threads, 31 -> 44 GMAC/s, at 16 rows 44 ->
    /// 57; AMX from there), else [`Strategy::F32`], exact up to summation order.
    pub fn default_for(dtype: DType, m: usize) -> Strategy {
        match crate::env::cpu_quant() {
            Some("f32") => Strategy::F32,
            Some("q8") => Strategy::Q8,
            Some("q8r") => Strategy::Q8Residual,
            _ if dtype.block().is_some_and(|b| b.elements == 256) && m >= Q8_MIN_ROWS => Strategy::Q8,
            _ if dtype.block().is_some_and(|b| b.elements == 256) => Strategy::Q8Residual,
            // On AMX the 32-value types' prefill takes the tiles with two 8-bit terms (`x86_amx32`).
            #[cfg(target_arch = "x86_64")]
            _ if m >= Q8_MIN_ROWS && x86_amx::format(dtype).is_some() && Isa::Amx.available() => Strategy::Q8Residual,
            // Below, with VNNI, two 8-bit terms as one 16-bit integer (`x86_q32_vnni`).
            #[cfg(target_arch = "x86_64")]
            _ if m < Q8_MIN_ROWS && x86_q32_vnni::covers(dtype) && Isa::Avx512Vnni.available() => Strategy::Q8Residual,
            _ => Strategy::F32,
        }
    }
}

/// `out[i * n + j] = sum_kk x[i * k + kk] * W[j][kk]` (i < m, j < n), W's row j being `w[j * row_bytes..][..row_bytes]`
/// with `row_bytes = k / dtype.block().elements * block.bytes`; k a multiple of the block's elements. Multi-threaded
/// (rayon's current pool) and deterministic: the same inputs give bit-identical output whatever the thread count.
pub fn matmul_quantized(
    dtype: DType,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    n: usize,
    out: &mut [f32],
) -> Result<(), String> {
    matmul_quantized_with(dtype, x, m, k, w, n, out, Strategy::default_for(dtype, m), Isa::detect())
}

/// [`matmul_quantized`] with the strategy and instruction set chosen by the caller (tests, benchmarks, tuning).
/// `Err` where `isa` is not available on this CPU.
#[allow(clippy::too_many_arguments)]
pub fn matmul_quantized_with(
    dtype: DType,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    n: usize,
    out: &mut [f32],
    strategy: Strategy,
    isa: Isa,
) -> Result<(), String> {
    let b = dtype.block().ok_or_else(|| format!("matmul_quantized: {} is not a block-quantized type", dtype.name()))?;
    if k % b.elements != 0 {
        return Err(format!(
            "matmul_quantized: k = {k} is not a multiple of {}'s {} values a block",
            dtype.name(),
            b.elements
        ));
    }
    let row_bytes = k / b.elements * b.bytes;
    let len =
        |a: usize, b: usize, what: &str| a.checked_mul(b).ok_or_else(|| format!("matmul_quantized: {what} overflows"));
    let (x_len, w_len, out_len) = (len(m, k, "m * k")?, len(n, row_bytes, "n * row_bytes")?, len(m, n, "m * n")?);
    for (what, got, want) in [("x", x.len(), x_len), ("w", w.len(), w_len), ("out", out.len(), out_len)] {
        if got != want {
            return Err(format!(
                "matmul_quantized: {what} has {got} elements, {want} wanted (m = {m}, k = {k}, n = {n}, {} bytes a row of {})",
                row_bytes,
                dtype.name()
            ));
        }
    }
    if !isa.available() {
        return Err(format!("matmul_quantized: {isa:?} is not available on this CPU"));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    match strategy {
        Strategy::F32 => {
            let sums = x_sums(dtype, x);
            let xs: Vec<F32Row> = (0..m).map(|i| F32Row::of(x, &sums, i, k)).collect();
            let kernel = f32_kernel(dtype, isa);
            drive(&xs, n, w, row_bytes, out, f32_rows(isa), &|rows, xs, out| kernel(dtype, rows, xs, out));
        }
        Strategy::Q8Residual => {
            let acts = Q8Acts::with_residuals(x, m, k, activation_block(b.elements));
            #[cfg(target_arch = "x86_64")]
            if let Some(format) = x86_amx::format(dtype).filter(|f| isa == Isa::Amx && !f.k_type() && m >= Q8_MIN_ROWS)
            {
                x86_amx::matmul(format, &acts, m, k, w, n, out);
                return Ok(());
            }
            #[cfg(target_arch = "x86_64")]
            if matches!(isa, Isa::Avx512Vnni | Isa::Amx) && x86_q32_vnni::covers(dtype) {
                let q16 = x86_q32_vnni::Q16Acts::new(dtype, &acts, m);
                let xs = q16.rows();
                drive(&xs, n, w, row_bytes, out, MR, &|rows, xs, out| x86_q32_vnni::dot_rows(dtype, rows, xs, out));
                return Ok(());
            }
            let xs: Vec<[Q8Row; 2]> = (0..m).map(|i| [acts.row(2 * i), acts.row(2 * i + 1)]).collect();
            let kernel = q8_kernel(dtype, isa);
            drive(&xs, n, w, row_bytes, out, MR, &|rows, pairs, out| {
                // Two pairs (four quantized rows) a kernel call; each output the sum of its pair's two.
                let flat = pairs.as_flattened();
                let mut terms = [0.0f32; 4];
                for (j, row) in rows.chunks_exact(row_bytes).enumerate() {
                    for (c, chunk) in flat.chunks(4).enumerate() {
                        kernel(dtype, row, chunk, &mut terms[..chunk.len()]);
                        for (q, t) in terms[..chunk.len()].chunks_exact(2).enumerate() {
                            out[j * pairs.len() + 2 * c + q] = t[0] + t[1];
                        }
                    }
                }
            });
        }
        Strategy::Q8 => {
            let acts = Q8Acts::new(x, m, k, activation_block(b.elements));
            #[cfg(target_arch = "x86_64")]
            if let Some(format) = x86_amx::format(dtype).filter(|f| isa == Isa::Amx && f.k_type()) {
                x86_amx::matmul(format, &acts, m, k, w, n, out);
                return Ok(());
            }
            let xs: Vec<Q8Row> = (0..m).map(|i| acts.row(i)).collect();
            let kernel = q8_kernel(dtype, isa);
            let tile = q8_tile_kernel(dtype, isa, row_bytes);
            drive(&xs, n, w, row_bytes, out, q8_rows(dtype, isa), &|rows, xs, out| {
                // Whole tiles of rows first where a kernel takes them (at fixed places: rows from a multiple of
                // the tile's rows, so a row's arithmetic does not depend on the task), then one row at a time.
                let count = rows.len() / row_bytes;
                let mut first = 0;
                if let Some((tile, tr)) = tile {
                    while first + tr <= count {
                        let at = first * xs.len();
                        tile(
                            &rows[first * row_bytes..][..tr * row_bytes],
                            row_bytes,
                            xs,
                            &mut out[at..][..tr * xs.len()],
                        );
                        first += tr;
                    }
                }
                for (j, row) in rows[first * row_bytes..].chunks_exact(row_bytes).enumerate() {
                    kernel(dtype, row, xs, &mut out[(first + j) * xs.len()..][..xs.len()]);
                }
            });
        }
    }
    Ok(())
}

/// One row of x for the f32 strategy: its values, and where the weight type has min terms (Q4_1, Q5_1, Q4_K,
/// Q5_K) the sums of its values over each group of 32 (else empty).
#[derive(Clone, Copy)]
pub(crate) struct F32Row<'a> {
    pub x: &'a [f32],
    pub s: &'a [f32],
}

impl<'a> F32Row<'a> {
    fn of(x: &'a [f32], sums: &'a [f32], i: usize, k: usize) -> F32Row<'a> {
        let s = if sums.is_empty() { sums } else { &sums[i * k / 32..][..k / 32] };
        F32Row { x: &x[i * k..][..k], s }
    }
}

/// The sums of x over each group of 32 values (left to right), where `dtype` has min terms; else empty.
fn x_sums(dtype: DType, x: &[f32]) -> Vec<f32> {
    if matches!(dtype, DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K) {
        x.chunks_exact(32).map(|c| c.iter().fold(0.0f32, |a, &v| a + v)).collect()
    } else {
        Vec::new()
    }
}

/// Several rows of W (whole rows) against up to [`MR`] rows of x: `out[j * xs.len() + i]`.
type F32Kernel = fn(DType, &[u8], &[F32Row], &mut [f32]);
type Q8Kernel = for<'a> fn(DType, &[u8], &[Q8Row<'a>], &mut [f32]);

/// The f32-strategy kernel of `isa` (available) for `dtype`.
fn f32_kernel(dtype: DType, isa: Isa) -> F32Kernel {
    let _ = dtype;
    match isa {
        Isa::Scalar => scalar::dot_rows_f32,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86_f32::dot_rows_avx2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => x86_f32_512::dot_rows_avx512,
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => unreachable!("not available"),
    }
}

/// Rows of x a call of [`f32_kernel`]`(_, isa)` takes: [`MR_WIDE`] for the AVX-512 kernels, else [`MR`].
fn f32_rows(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => MR_WIDE,
        _ => MR,
    }
}

/// Rows of x a call of [`q8_kernel`]`(dtype, isa)` takes: [`MR_WIDE`] for the AVX-512 K-type kernels, else
/// [`MR`].
fn q8_rows(dtype: DType, isa: Isa) -> usize {
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx) && x86_q8_512::covers(dtype) {
        return MR_WIDE;
    }
    let _ = (dtype, isa);
    MR
}

/// Several rows of W at once (the count given beside) against up to [`MR_WIDE`] rows of x: `out[j * xs.len() + i]`.
type Q8TileKernel = for<'a> fn(&[u8], usize, &[Q8Row<'a>], &mut [f32]);

/// The 8-bit strategy's kernel that takes several rows of W at once, where this type and CPU have one: Q4_K
/// with AVX-512 VNNI, 8 rows (see `x86_q4k_tile`). Prefill's only: at decode's two quantized rows (the
/// two-term strategy) it was slower than the one-row kernel (llama-3.2-1b Q4_K_M, 48 -> 55 ms a token).
fn q8_tile_kernel(dtype: DType, isa: Isa, row_bytes: usize) -> Option<(Q8TileKernel, usize)> {
    #[cfg(target_arch = "x86_64")]
    if dtype == DType::Q4_K && matches!(isa, Isa::Avx512Vnni | Isa::Amx) && x86_q4k_tile::fits(row_bytes) {
        return Some((x86_q4k_tile::dot_tile, x86_q4k_tile::ROWS));
    }
    let _ = (dtype, isa, row_bytes);
    None
}

fn q8_kernel(dtype: DType, isa: Isa) -> Q8Kernel {
    match isa {
        Isa::Scalar => scalar::dot_rows_q8,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if x86_q8_512::covers(dtype) => x86_q8_512::dot_rows_avx512,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni | Isa::Amx if x86_q8_512::covers(dtype) => x86_q8_512::dot_rows_vnni,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => x86_q8::dot_rows_avx2,
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni | Isa::Amx => unreachable!("not available"),
    }
}

/// One row of W (`row`, whole blocks) times one f32 row of x, with the best kernel of this CPU.
#[allow(dead_code)] // a building block for callers in fuse-runtime
pub(crate) fn dot_row(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    let mut out = [0.0];
    let sums = x_sums(dtype, x);
    f32_kernel(dtype, Isa::detect())(dtype, row, &[F32Row { x, s: &sums }], &mut out);
    out[0]
}

/// The 8-bit activations' block for weights of `elements` values a block: 32 like Q8_0 for the 32-value types,
/// 256 like Q8_K for the K types.
fn activation_block(elements: usize) -> usize {
    if elements == 32 {
        32
    } else {
        256
    }
}

/// The 8-bit activation quantizer of [`Strategy::Q8`]: the m rows of x for `dtype`'s block size.
#[allow(dead_code)]
pub(crate) fn quantize_activations(dtype: DType, x: &[f32], m: usize, k: usize) -> Q8Acts {
    Q8Acts::new(x, m, k, activation_block(dtype.block().map_or(32, |b| b.elements)))
}

/// The output pointer shared by tasks that write disjoint elements.
pub(crate) struct Out(*mut f32);
unsafe impl Sync for Out {}
impl Out {
    pub(crate) fn new(out: &mut [f32]) -> Out {
        Out(out.as_mut_ptr())
    }
    /// Writes element `at`. Safety: in bounds, and no other task writes it.
    pub(crate) unsafe fn set(&self, at: usize, v: f32) {
        *self.0.add(at) = v;
    }
    /// Where element `at` is. Safety: in bounds; the caller writes only elements no other task writes.
    pub(crate) unsafe fn at(&self, at: usize) -> *mut f32 {
        self.0.add(at)
    }
}

/// Runs `kernel` over every (tile of up to NR rows of W, group of up to `mr` rows of x, at most [`MR_WIDE`]) in
/// fixed tiles, in parallel; `kernel(rows, xs, out)` writes `out[j * xs.len() + i]`.
fn drive<X: Sync>(
    xs: &[X],
    n: usize,
    w: &[u8],
    row_bytes: usize,
    out: &mut [f32],
    mr: usize,
    kernel: &(dyn Fn(&[u8], &[X], &mut [f32]) + Sync),
) {
    let mr = mr.clamp(1, MR_WIDE);
    let m = xs.len();
    let mc = if m <= 16 { m } else { MC };
    // Each task takes `span` consecutive rows of W (whole kernel tiles of NR): long runs of memory, which the
    // hardware prefetchers follow (interleaved 16-row tiles ran at 12.7 GB/s, runs of a few per thread at 16+),
    // and a few tasks a thread to even out. Results do not depend on the span (each output is one dot).
    let (threads, it) = (rayon::current_num_threads().max(1), m.div_ceil(mc));
    let least = (crate::env::cpu_task_kb() * 1024).div_ceil(row_bytes.max(1)).next_multiple_of(NR);
    let span = n.div_ceil(threads * TASKS_PER_THREAD * it).next_multiple_of(NR).max(NR).max(least);
    let jt = n.div_ceil(span);
    let ptr = Out(out.as_mut_ptr());
    let ptr = &ptr;
    // Decode's products are small and many: the spin pool starts them without waking a sleeping thread.
    super::spin_pool::for_each_task(jt * it, &|t| {
        let (i0, s0) = (t / jt * mc, t % jt * span);
        let (i1, s1) = ((i0 + mc).min(m), (s0 + span).min(n));
        let mut tmp = [0.0f32; NR * MR_WIDE];
        for j0 in (s0..s1).step_by(NR) {
            let j1 = (j0 + NR).min(s1);
            for g in (i0..i1).step_by(mr) {
                let r = mr.min(i1 - g);
                kernel(&w[j0 * row_bytes..j1 * row_bytes], &xs[g..g + r], &mut tmp[..(j1 - j0) * r]);
                for (jj, vs) in tmp[..(j1 - j0) * r].chunks_exact(r).enumerate() {
                    for (q, &v) in vs.iter().enumerate() {
                        // Safety: (g + q, j0 + jj) < (m, n) and each is in exactly one task.
                        unsafe { ptr.set((g + q) * n + j0 + jj, v) };
                    }
                }
            }
        }
    });
}
