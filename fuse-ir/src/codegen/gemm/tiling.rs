//! What the GEMM templates' configs (`SkinnyConfig`, `WgmmaConfig`) share: the output tile of one block,
//! and how an `m x n` product divides into tiles, blocks and split-K partial sums.

pub trait GemmTiling {
    /// Output columns (weight rows) per block.
    fn cols_per_block(&self) -> usize;
    /// Rows of the left operand per block.
    fn rows_per_block(&self) -> usize;
    /// Blocks that split K; above 1 a launch needs a workspace of partial tiles and a counter per tile.
    fn splits(&self) -> usize;

    /// Row blocks of an `m`-row product (a template may round them up, e.g. to whole clusters).
    fn row_blocks(&self, m: usize) -> usize {
        m.div_ceil(self.rows_per_block())
    }

    /// Output tiles of an `m x n` product (one block each, or `splits` blocks each).
    fn tiles(&self, m: usize, n: usize) -> usize {
        n.div_ceil(self.cols_per_block()).saturating_mul(self.row_blocks(m))
    }

    /// Blocks for an `m x n` product (`None` past the grid limit).
    fn grid(&self, m: usize, n: usize) -> Option<u32> {
        let blocks = self.tiles(m, n).checked_mul(self.splits())?;
        u32::try_from(blocks).ok().filter(|&b| b < (1 << 31))
    }

    /// Floats of partial sums a split-K launch needs (0 without splits): a whole tile per split and product.
    fn workspace_floats(&self, m: usize, n: usize, dual: bool) -> usize {
        if self.splits() == 1 {
            return 0;
        }
        let tile = self.rows_per_block() * self.cols_per_block() * (1 + usize::from(dual));
        self.tiles(m, n) * self.splits() * tile
    }
}

#[cfg(test)]
mod tests {
    use super::GemmTiling;
    use crate::codegen::{SkinnyConfig, WgmmaConfig};

    #[test]
    fn products_divide_into_tiles_blocks_and_partial_sums() {
        // r8c16: 16 weight rows x 8 rows of X per block. A [17, 1000] product: 63 x 3 tiles.
        let skinny = SkinnyConfig::by_name("r8c16").unwrap();
        assert_eq!((skinny.cols_per_block(), skinny.rows_per_block()), (16, 8));
        assert_eq!(
            (skinny.tiles(17, 1000), skinny.grid(17, 1000), skinny.workspace_floats(17, 1000, true)),
            (189, Some(189), 0)
        );
        // n16k4: 128 x 16, K split in 4: 8 x 2 tiles, 4 blocks each, a partial tile per block and product.
        let split = WgmmaConfig::by_name("n16k4").unwrap();
        assert_eq!((split.tiles(17, 1000), split.grid(17, 1000)), (16, Some(64)));
        assert_eq!(split.workspace_floats(17, 1000, true), 64 * 16 * 128 * 2);
        // n128m2: one block of rows, rounded up to a pair.
        let paired = WgmmaConfig::by_name("n128m2").unwrap();
        assert_eq!((paired.row_blocks(17), paired.tiles(17, 1000), paired.grid(17, 1000)), (2, 16, Some(16)));
        // Past the grid limit: no launch.
        assert_eq!(skinny.grid(1 << 20, 1 << 20), None);
    }
}
