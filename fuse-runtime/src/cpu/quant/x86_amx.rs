//! Prefill's block-quantized products on Intel AMX (`amx-tile` + `amx-int8`, Sapphire Rapids and later): each
//! `tdpbusd` / `tdpbssd` multiplies a 16-row tile of weights by a tile of 16 activation rows, 16 x 16 x 64
//! products in one instruction where `vpdpbusd` makes 64. llama.cpp's CPU backend uses AMX for prefill where the
//! CPU has it. Q4_K, Q5_K and Q6_K against one 8-bit activation term (`Strategy::Q8`): `x86_amx_k`, the weights
//! times their group's scale in two byte planes, one store a block. Q4_0, Q4_1 and Q8_0 against two terms
//! (`Strategy::Q8Residual`): `x86_amx32`, a block a product. Both end in the f32 arithmetic of the AVX-512
//! kernels (block scales, min terms), so results equal `x86_q8_512`'s up to f32 summation order.
//!
//! Layouts (`x86_amx_panel`): the activations are packed once a call, 16 rows a tile, in the layout the second
//! operand is read in (4 consecutive values of each of the 16 rows per 64-byte row of the tile); each task
//! widens its weight rows 16 at a time into a panel, two panels at once (kept by the thread from call to call),
//! and runs every pair of activation tiles against them. Rows past n or m are zeros, computed and not stored.
//!
//! Linux grants a process the AMX state on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`):
//! [`available`] asks once, and a refusal, a CPU without AMX or `FUSE_CPU_AMX=off` leaves the AVX-512 kernels.
//! The tile instructions are inline assembly (their intrinsics are not stable Rust); each task loads the tile
//! configuration on its own thread and releases the tiles when done.

use super::q8::Q8Acts;
use super::x86_amx_k::split_product;
use super::x86_amx_panel::{pack, Format, Packed, Panel, T};
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Whether the AMX kernel runs here: the CPU has AMX-TILE and AMX-INT8, Linux granted the tile state, and
/// `FUSE_CPU_AMX` is not `off`. Decided once.
pub(super) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if !crate::env::cpu_amx() || !super::Isa::Avx512.available() {
            return false;
        }
        // CPUID leaf 7, sub-leaf 0: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (1 << 24) == 0 || edx & (1 << 25) == 0 {
            return false;
        }
        // The OS must have turned the tile state on (XCR0 bits 17 and 18); a CPU that lists AMX under a
        // hypervisor that does not enable it would fault on the first tile instruction.
        // Safety: XGETBV exists where CPUID leaf 1 says OSXSAVE (checked first).
        if __cpuid(1).ecx & (1 << 27) == 0 || unsafe { xcr0() } & (0b11 << 17) != 0b11 << 17 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
        const XFEATURE_XTILEDATA: usize = 18;
        request_tile_state(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    })
}

/// The OS's XCR0 (which register states it saves and restores).
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    _xgetbv(0)
}

/// `arch_prctl(code, feature) == 0`, by the raw system call (no libc dependency for one call).
fn request_tile_state(code: usize, feature: usize) -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    let ret: isize;
    // Safety: a system call that reads two integers; rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL as isize => ret, in("rdi") code, in("rsi") feature,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

/// The panel format of `dtype` where the AMX kernels read its blocks: Q4_K, Q5_K and Q6_K under one 8-bit
/// term, Q4_0, Q4_1 and Q8_0 under two (`Format::k_type`); `None` for the others.
pub(super) fn format(dtype: fuse_ir::DType) -> Option<Format> {
    use fuse_ir::DType::*;
    Some(match dtype {
        Q4_K => Format::Q4K,
        Q5_K => Format::Q5K,
        Q6_K => Format::Q6K,
        Q4_0 => Format::Q4_0,
        Q4_1 => Format::Q4_1,
        Q8_0 => Format::Q8_0,
        _ => return None,
    })
}

/// The tile configuration for groups of `group` values: tmm0-3 the 16 x 16 i32 sums of (weight tile,
/// activation tile) (0, 0), (0, 1), (1, 0), (1, 1); tmm4-5 the two weight tiles (16 rows of `group` bytes),
/// tmm6-7 the two activation tiles (`group / 4` rows of 64 bytes: the group's values of 16 rows). Each tile
/// loaded serves two products.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const fn config(group: usize) -> TileConfig {
    let mut c = TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
    let mut t = 0;
    while t < 8 {
        (c.colsb[t], c.rows[t]) = match t {
            0..=3 => (64, 16),
            4 | 5 => (group as u16, 16),
            _ => (64, (group / 4) as u8),
        };
        t += 1;
    }
    c
}

thread_local! {
    /// This thread's two panels, kept from call to call while the family of formats and k stay (each is 64-512 KB at
    /// the models' shapes: allocated and freed every task, they cost the system calls that return memory to
    /// the kernel, whose TLB shootdowns stop every thread of the process).
    static PANELS: RefCell<Option<[Panel; 2]>> = const { RefCell::new(None) };
}

/// The 32-value types' (`x86_amx32`): a weight tile is a block of 16 rows.
const GROUPS_OF_32: TileConfig = config(32);
/// The K types' (`x86_amx_k`): every tile 16 rows of 64 bytes, a weight tile 64 values of 16 rows.
const FULL_DEPTH: TileConfig = config(64);

/// `out[i * n + j] = sum_k x[i, k] w[j, k]` for the m rows of x in `acts` and the n rows of `w` (`format`'s
/// blocks): for the K types one 8-bit term a row (blocks of 256), for the 32-value types two (rows 2i and
/// 2i + 1, `Q8Acts::with_residuals`, blocks of 32). Only called where [`available`].
pub(super) fn matmul(format: Format, acts: &Q8Acts, m: usize, k: usize, w: &[u8], n: usize, out: &mut [f32]) {
    let blocks = k / format.block_values();
    let row_bytes = blocks * format.block_bytes();
    let terms = if format.k_type() { 1 } else { 2 };
    debug_assert!(available() && k.is_multiple_of(format.block_values()) && w.len() == n * row_bytes);
    debug_assert!(out.len() == m * n && acts.qs.len() == terms * m * k);
    let packed: Vec<Packed> = (0..terms).map(|t| pack(acts, m, k, t, terms)).collect();
    // Pairs of weight tiles (16 rows each) a unit of work; a task takes `span` pairs.
    let pairs = n.div_ceil(2 * T);
    let threads = rayon::current_num_threads().max(1);
    let span = pairs.div_ceil(threads * 2).max(1);
    let out = super::Out(out.as_mut_ptr());
    let (out, packed) = (&out, packed.as_slice());
    let m_tiles = m.div_ceil(T);
    let config: &TileConfig = if format.k_type() { &FULL_DEPTH } else { &GROUPS_OF_32 };
    // Each task's pairs of rows: filled into this thread's panels, multiplied by every pair of activation tiles.
    let task = |panels: &mut [Panel; 2], t: usize| {
        // Safety: AMX is available (the caller checked); the configuration is this thread's, released below.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) config as *const TileConfig, options(nostack)) };
        for pair in t * span..((t + 1) * span).min(pairs) {
            // The pair's weight rows (the second tile empty past n: zeros, not stored).
            let rows: [std::ops::Range<usize>; 2] =
                std::array::from_fn(|h| ((2 * pair + h) * T).min(n)..((2 * pair + h) * T + T).min(n));
            for (panel, rows) in panels.iter_mut().zip(&rows) {
                // Safety: AVX-512, AVX2, FMA and F16C come with AMX here (checked by the caller).
                unsafe { panel.fill(w, row_bytes, rows.clone()) };
            }
            // Activation tiles two at a time (an odd last one twice, stored once).
            for mp in 0..m_tiles.div_ceil(2) {
                let mts = [2 * mp, (2 * mp + 1).min(m_tiles - 1)];
                let mut sums = [[0.0f32; T * T]; 4];
                // Safety: AMX and AVX-512 are available; the panels and the packed tiles hold k values.
                unsafe {
                    match format {
                        Format::Q4K | Format::Q5K | Format::Q6K => {
                            for (h, panel) in panels.iter().enumerate() {
                                match format {
                                    Format::Q6K => split_product::<true>(panel, &packed[0], mts, k, &mut sums, 2 * h),
                                    _ => split_product::<false>(panel, &packed[0], mts, k, &mut sums, 2 * h),
                                }
                            }
                        }
                        _ => super::x86_amx32::quad_product(panels, packed, mts, k, &mut sums),
                    }
                }
                for (q, sums) in sums.iter().enumerate() {
                    let (rows, mt) = (&rows[q / 2], mts[q % 2]);
                    if q % 2 == 1 && mts[1] == mts[0] {
                        continue;
                    }
                    // Row by row of the output (this tile's columns side by side in memory).
                    for i in mt * T..(mt * T + T).min(m) {
                        // Safety: (i, rows) < (m, n), written by this task alone (its pairs of row tiles);
                        // AVX-512 comes with AMX.
                        unsafe { store_row(out.at(i * n + rows.start), rows.len(), sums, i - mt * T) };
                    }
                }
            }
        }
        // Safety: the tiles were configured above.
        unsafe { asm!("tilerelease", options(nostack)) };
    };
    crate::cpu::spin_pool::for_each_task(pairs.div_ceil(span), &|t| {
        PANELS.with_borrow_mut(|kept| {
            if !kept.as_mut().is_some_and(|p| p.iter_mut().all(|p| p.serves(format, blocks))) {
                *kept = Some([Panel::new(format, blocks), Panel::new(format, blocks)]);
            }
            let panels = kept.as_mut().expect("kept above");
            task(panels, t);
        })
    });
}

/// The first `count` of `sums`' column `col` (one activation row's results for 16 weight rows) to `to`.
#[target_feature(enable = "avx512f")]
unsafe fn store_row(to: *mut f32, count: usize, sums: &[f32; T * T], col: usize) {
    let rows = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    let v = _mm512_i32gather_ps::<4>(_mm512_add_epi32(rows, _mm512_set1_epi32(col as i32)), sums.as_ptr());
    _mm512_mask_storeu_ps(to, ((1u32 << count) - 1) as u16, v);
}
