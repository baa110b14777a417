//! CUDA graphs (`CudaGraph`): a decode-like step (an embedding of ids held in a tensor, a matmul with an
//! epilogue, a row norm, a cache append at a position held in a tensor) captured once and replayed with new
//! inputs written between replays, against the same step run call by call; what a capture refuses (host
//! round trips) and that the device works on after a refused capture. On the CPU (and with
//! `FUSE_GRAPHS=off`) `capture` records nothing and `replay` calls the closure: the same cases run there.

use fuse::prelude::*;
use fuse::testing::{assert_close, random, TestRng};

/// One step: the rows of `table` that `ids` names, through a linear layer and an rms_norm, written into
/// `cache` at the position `pos` holds.
#[fuse]
fn step(ids: &Tensor, table: &Tensor, w: &Tensor, norm: &Tensor, cache: &Tensor, pos: &Tensor) -> Result<Tensor> {
    let x = embedding(ids, table);
    let h = rms_norm(&(x.matmul(&w.t()) + &x), norm, 1e-5);
    Ok(cache.slice_set(&h, 1, pos))
}

struct Case {
    ids: Tensor,
    pos: Tensor,
    table: Tensor,
    w: Tensor,
    norm: Tensor,
    cache: Tensor,
}

impl Case {
    fn new(dev: &Device, dtype: DType) -> Case {
        let mut r = TestRng::new(71);
        let (vocab, hidden, capacity) = (37, 64, 9);
        Case {
            ids: Tensor::from_vec(vec![0u32], &[1, 1], dev).unwrap(),
            pos: Tensor::from_vec(vec![0u32], &[1], dev).unwrap(),
            table: random(&mut r, &[vocab, hidden], dtype, -1.0, 1.0, dev),
            w: random(&mut r, &[hidden, hidden], dtype, -0.2, 0.2, dev),
            norm: random(&mut r, &[hidden], dtype, 0.5, 1.5, dev),
            cache: Tensor::zeros(&[1, capacity, hidden], dtype, dev).unwrap(),
        }
    }

    fn run(&self) -> Result<Tensor> {
        step(&self.ids, &self.table, &self.w, &self.norm, &self.cache, &self.pos)
    }

    /// Writes the step's inputs (token `id` at position `at`) into the tensors the step reads.
    fn set(&self, id: u32, at: u32, dev: &Device) -> Result<()> {
        // Alternately by a host copy and by a slice_set: both write the memory the step reads.
        if id % 2 == 0 {
            self.ids.copy_from_host(&[id])?;
        } else {
            self.ids.slice_set(&Tensor::from_vec(vec![id], &[1, 1], dev)?, 0, 0)?;
        }
        self.pos.copy_from_host(&[at])
    }
}

fn a_captured_step_replays_with_new_inputs(dev: &Device) {
    for dtype in [DType::F32, DType::BF16] {
        let (graphed, plain) = (Case::new(dev, dtype), Case::new(dev, dtype));
        graphed.run().expect("the step runs once before the capture (compiles, tunes)");
        let (ids, table, w, norm, cache, pos) = (
            graphed.ids.clone(),
            graphed.table.clone(),
            graphed.w.clone(),
            graphed.norm.clone(),
            graphed.cache.clone(),
            graphed.pos.clone(),
        );
        let mut graph =
            CudaGraph::capture(dev, move || step(&ids, &table, &w, &norm, &cache, &pos).map(|_| ())).expect("capture");
        assert_eq!(
            graph.is_recorded(),
            dev.is_cuda() && std::env::var("FUSE_GRAPHS").is_err(),
            "recorded on a GPU only"
        );
        let tokens = [(5u32, 0u32), (36, 1), (0, 2), (17, 8), (5, 3)];
        for (id, at) in tokens {
            graphed.set(id, at, dev).expect("inputs");
            graph.replay().expect("replay");
            plain.set(id, at, dev).expect("inputs");
            plain.run().expect("the step call by call");
        }
        // Every row a step wrote holds what the calls wrote; the rows never written are still zero.
        assert_close(&format!("graph replays {dtype} on {dev}"), &graphed.cache, &plain.cache, dtype, dev);
        let rows: Vec<f32> = graphed.cache.to_vec().unwrap();
        let unwritten = &rows[4 * 64..8 * 64];
        assert!(unwritten.iter().all(|&v| v == 0.0), "rows 4..8 were never written");
        assert!(rows[..64].iter().any(|&v| v != 0.0), "row 0 was written");
    }
}

fn a_capture_refuses_host_round_trips(dev: &Device) {
    let case = Case::new(dev, DType::F32);
    case.run().expect("warm");
    if !dev.is_cuda() {
        // Nothing is recorded on the CPU: the closure runs on each replay, host reads included.
        let out = case.cache.clone();
        let mut graph = CudaGraph::capture(dev, move || out.to_vec::<f32>().map(|_| ())).expect("capture");
        graph.replay().expect("a host read in a plain step");
        return;
    }
    let out = case.cache.clone();
    let read = CudaGraph::capture(dev, move || out.to_vec::<f32>().map(|_| ())).err().expect("to_vec refused");
    assert!(matches!(&read, Error::Capture { what } if what.contains("copy to the host")), "{read}");
    let gpu = dev.clone();
    let upload = CudaGraph::capture(dev, move || Tensor::from_vec(vec![1.0f32], &[1], &gpu).map(|_| ()))
        .err()
        .expect("from_vec refused");
    assert!(matches!(&upload, Error::Capture { what } if what.contains("copy from the host")), "{upload}");
    // The device is usable after a refused capture, and a later capture works.
    case.set(3, 2, dev).expect("inputs after a refused capture");
    case.run().expect("a call after a refused capture");
    let c = Case::new(dev, DType::F32);
    c.run().expect("warm");
    let (ids, table, w, norm, cache, pos) =
        (c.ids.clone(), c.table.clone(), c.w.clone(), c.norm.clone(), c.cache.clone(), c.pos.clone());
    let mut graph = CudaGraph::capture(dev, move || step(&ids, &table, &w, &norm, &cache, &pos).map(|_| ()))
        .expect("capture after a refused one");
    graph.replay().expect("replay");
    dev.synchronize().expect("the replay finishes");
}

/// The same step captured for one launch (`capture_one_launch`: its launches as tasks of one persistent
/// kernel), three times over with eager ops between, writes what the recorded graph writes, bit for bit, replay
/// after replay; a launch that cannot be a task (the 1,024-thread argmax) stays its own, named in the report.
fn a_step_captured_for_one_launch_writes_what_the_graph_writes(dev: &Device) {
    for dtype in [DType::F32, DType::BF16] {
        let (graphed, one) = (Case::new(dev, dtype), Case::new(dev, dtype));
        let picked = |c: &Case| Tensor::zeros(&[1], DType::U32, &c.cache.device()).unwrap();
        let (picked_graph, picked_one) = (picked(&graphed), picked(&one));
        let steps = |c: &Case, picked: &Tensor| -> Result<()> {
            c.run()?;
            let h = exp(&c.cache.narrow(1, 0, 2)?.to_dtype(DType::F32)?)?;
            step(&c.ids, &c.table, &c.w, &c.norm, &c.cache, &c.pos)?;
            picked.slice_set(&h.sum_keepdim(1)?.reshape(&[1, 64])?.argmax(-1)?.reshape(&[1])?, 0, 0)?;
            step(&c.ids, &c.table, &c.w, &c.norm, &c.cache, &c.pos).map(|_| ())
        };
        steps(&graphed, &picked_graph).expect("the steps run once before the captures");
        steps(&one, &picked_one).expect("the steps run once before the captures");
        let mut graph = CudaGraph::capture(dev, || steps(&graphed, &picked_graph)).expect("capture");
        let mut tasks = CudaGraph::capture_one_launch(dev, || steps(&one, &picked_one)).expect("one-launch capture");
        match tasks.one_launch_report() {
            // Eager copies and memsets are not kernels: such a step stays the recorded graph, and says so.
            Some(report) => {
                eprintln!("one-launch step on {dev} ({dtype}): {report:?}");
                let stays = report.kept.first().is_some_and(|k| k.contains("stays the recorded graph"));
                assert!(stays || report.kept.iter().any(|k| k.contains("argmax")), "{report:?}");
                // Each persistent kernel's figures, one each.
                let kernels = report.step_kernels;
                assert!(report.blocks.len() == kernels && report.local_bytes.len() == kernels, "{report:?}");
            }
            None => assert!(!dev.is_cuda() || std::env::var("FUSE_GRAPHS").is_ok(), "a GPU capture reports"),
        }
        for (id, at) in [(5u32, 0u32), (36, 1), (0, 2), (17, 8), (5, 3)] {
            graphed.set(id, at, dev).expect("inputs");
            graph.replay().expect("replay");
            one.set(id, at, dev).expect("inputs");
            tasks.replay().expect("one-launch replay");
        }
        let bits = |t: &Tensor| {
            t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&one.cache), bits(&graphed.cache), "{dtype} on {dev}: the caches");
        assert_eq!(picked_one.to_vec::<u32>().unwrap(), picked_graph.to_vec::<u32>().unwrap(), "{dtype} on {dev}");
    }
}

fn copy_from_host_writes_in_place(dev: &Device) {
    let x = Tensor::zeros(&[2, 3], DType::BF16, dev).unwrap();
    let view = x.clone();
    let values: Vec<half::bf16> = (0..6).map(|i| half::bf16::from_f32(i as f32 - 2.5)).collect();
    x.copy_from_host(&values).expect("six bf16 values");
    assert_eq!(view.to_vec::<half::bf16>().unwrap(), values, "a clone sees the new values");
    assert!(matches!(x.copy_from_host(&[1.0f32; 6]), Err(Error::DType { .. })), "f32 values into bf16");
    assert!(matches!(x.copy_from_host(&values[..5]), Err(Error::DataLength { .. })), "five of six");
    assert!(x.t().unwrap().copy_from_host(&values).is_err(), "a transposed view is not dense");
}

fuse::device_tests!(
    a_captured_step_replays_with_new_inputs,
    a_capture_refuses_host_round_trips,
    a_step_captured_for_one_launch_writes_what_the_graph_writes,
    copy_from_host_writes_in_place
);
