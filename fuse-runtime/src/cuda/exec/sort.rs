//! `arg_sort_last_dim` and `arg_topk` on the GPU (`sort.cu`): a top-k of at most `SORT_CHUNK` is one launch
//! of the selection kernel (a block a row); a sort, or a larger top-k, is the bitonic network in launches
//! that spread each row over the GPU: the chunks sorted in shared memory, then for each wider merge its
//! long-distance steps (a thread a pair) and its rest within the chunks. The keys (f32) lie beside the
//! indices in the device's workspace, and a top-k that sorts keeps its indices there too and writes the first
//! k of each row.

use super::model::blocks;
use super::model_args::Words;
use super::Executor;
use crate::call::Value;
use crate::{Error, Result};
use fuse_ir::codegen::{ModelKernel, SORT_CHUNK, SORT_THREADS};
use fuse_ir::{ModelOp, NodeId, Op};

impl Executor<'_> {
    pub(super) fn run_sort(&mut self, id: NodeId) -> Result<()> {
        self.unreplayable();
        let Op::Model(op) = self.graph.op(id) else {
            return Err(self.internal(format!("%{} is no sort", id.0)));
        };
        let args = self.graph.node(id).args.clone();
        let out = self.allocate(id)?;
        let x = self.tensor_arg(args[0], "x")?;
        self.fits_layout(op.name(), &x)?;
        let r = x.shape().len();
        let (columns, kept) = (x.shape()[r - 1], out.shape()[r - 1]);
        if columns > 1 << 31 {
            let why = format!("rows of more than 2^31 elements on the GPU (the last axis holds {columns})");
            return Err(Error::unsupported(self.function, op.name(), why));
        }
        let rows = if columns == 0 { 0 } else { x.numel() / columns };
        if rows > 0 && kept > 0 {
            let (x_address, out_address) = (self.address(&x)?, self.address(&out)?);
            let layout = |words: &mut Words| {
                words.layout(&x.shape()[..r - 1], &x.strides()[..r - 1]);
            };
            let dtype_defines = ModelKernel::defines(x.dtype());
            if op == ModelOp::ArgTopK && kept <= SORT_CHUNK {
                let mut words = Words::default();
                words.address(x_address).address(out_address).counts(&[rows, columns, x.strides()[r - 1], kept]);
                layout(&mut words);
                self.launch_model_kernel_with(ModelKernel::TopK, &dtype_defines, blocks(rows, 1), 0, words)?;
            } else {
                let ascending = op == (ModelOp::ArgSort { ascending: true });
                // The keys beside the indices (f32, n a row) in the workspace, and a top-k's indices after
                // them (a sort's are its output).
                let (device, elements) = (self.device, rows * columns);
                let scratch_floats = if kept < columns { 2 * elements } else { elements };
                let workspace = device.workspace(scratch_floats * std::mem::size_of::<f32>())?;
                let keys = workspace.address;
                let scratch =
                    if kept < columns { keys + (elements * std::mem::size_of::<f32>()) as u64 } else { out_address };
                let padded = columns.next_power_of_two();
                let chunk = padded.min(SORT_CHUNK);
                let chunks = columns.div_ceil(chunk);
                let launch = |me: &mut Self, mode: usize, width: usize, distance: usize, last: bool| {
                    let mut words = Words::default();
                    words.address(x_address).address(scratch).address(keys).address(out_address);
                    words.counts(&[rows, columns, x.strides()[r - 1], ascending as usize, kept]);
                    words.counts(&[mode, width, distance, last as usize]);
                    layout(&mut words);
                    // Mode 1: a thread a pair; modes 0 and 2: a block a (row, chunk).
                    let grid =
                        if mode == 1 { blocks(rows * padded / 2, SORT_THREADS) } else { blocks(rows * chunks, 1) };
                    me.launch_model_kernel_with(ModelKernel::Sort, &dtype_defines, grid, 0, words)
                };
                launch(self, 0, 0, 0, padded <= chunk)?;
                let mut width = 2 * chunk;
                while width <= padded {
                    let mut distance = width / 2;
                    while distance >= chunk {
                        launch(self, 1, width, distance, false)?;
                        distance /= 2;
                    }
                    launch(self, 2, width, 0, width == padded)?;
                    width *= 2;
                }
                drop(workspace);
            }
        }
        self.values[id.index()] = Some(Value::Tensor(out));
        Ok(())
    }
}
