//! Decode and prefill speed of a SmolLM2-135M-shaped decoder (fuse-models' `llama`, random weights: the time
//! of a step does not depend on their values), BENCHMARKS.md's decode workload:
//!
//! ```text
//! cargo run --release --example bench_decode -- [--batches 1,4,16] [--cached 128,1024] [--steps 64]
//!       [--prompt 512] [--dtype bf16|f32] [--device cpu|cuda] [--modes graph,task-graph,generated,calls,unfused,one-launch] [--json FILE]
//!       [--extras on|off] [--model FILE.gguf] [--bandwidth GB/s]
//! ```
//! `--bandwidth GB/s` is the copy bandwidth of the floor (4,200, the H200's, by default).
//! `--model FILE.gguf` benchmarks a GGUF file instead (any Llama-family file: its own sizes, weights as the
//! file stores them, `--dtype` the activations' and the cache's dtype): the decode table and prefill, the
//! floor from the resident weight bytes (printed: the file's tensor bytes where every matrix stays blocks).
//! For each batch and cache fill, decode us per token (one token per sequence per step) in each mode:
//! `graph` (the step recorded once as a CUDA graph, each replay picking the next tokens on the device:
//! `Llama::greedy_decoder`), `task-graph` (the kernels a step recorded for one launch takes, as a CUDA graph:
//! `Llama::one_launch_graph_decoder`, the generated step's baseline), `generated` (those kernels run as the
//! tasks of one persistent kernel generated from them: `Llama::one_launch_decoder`, its report printed), `calls` (the fused step call by call, no graph), `unfused` (one op at a time)
//! and `one-launch` (batch 1 on an sm_90 GPU: the whole step as one launch of fuse-models' `DecodeStep`, a
//! custom kernel, with its own random Q4_1 weights, the cache filled by the library; launches queued back to
//! back, not in a graph, and the host time of one queued step printed);
//! then prefill tokens/s for a `--prompt`-token prompt (batch 1), the host time of one fused call that is not
//! captured, each block of a layer alone in a CUDA graph of 30 chained calls (us a call: where a step's time
//! goes, kernel by kernel, inside a graph), and decode attention alone (us and GB/s of keys and values at 1024
//! and 8192 cached). Prints a
//! table with the floor (the weights and the cache read once per step at `--bandwidth`) and writes `--json`.
//! `--extras off` stops after the decode table (for a profiler: `scripts/gpu/gpu-profile-decode.sh`).

use fuse::prelude::*;
use fuse_models::llama::{AttentionBlock, Config, DecodeStepWeights, FfnBlock, KvCache, Llama, StepInputs};
use std::time::Instant;

struct Options {
    batches: Vec<usize>,
    cached: Vec<usize>,
    steps: usize,
    prompt: usize,
    dtype: DType,
    device: String,
    modes: Vec<String>,
    json: Option<String>,
    /// Prefill, host time and attention after the decode table (`--extras off`: the decode table only).
    extras: bool,
    /// A GGUF file to load as stored instead of the random SmolLM2-shaped model.
    model: Option<String>,
    /// The copy bandwidth the floor is taken at, bytes/s (`--bandwidth GB/s`; the H200's 4,200 by default).
    bandwidth: f64,
}

fn list(v: &str) -> Result<Vec<usize>, String> {
    v.split(',').map(|x| x.trim().parse().map_err(|_| format!("`{x}` is not a count"))).collect()
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        batches: vec![1, 4, 16],
        cached: vec![128, 1024],
        steps: 64,
        prompt: 512,
        dtype: DType::BF16,
        device: "best".into(),
        modes: vec!["graph".into(), "calls".into(), "unfused".into()],
        json: None,
        extras: true,
        model: None,
        bandwidth: 4.2e12,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--batches" => o.batches = list(&value)?,
            "--cached" => o.cached = list(&value)?,
            "--steps" => o.steps = value.parse().map_err(|_| "--steps: a count")?,
            "--prompt" => o.prompt = value.parse().map_err(|_| "--prompt: a count")?,
            "--dtype" => o.dtype = if value == "f32" { DType::F32 } else { DType::BF16 },
            "--device" => o.device = value,
            "--modes" => o.modes = value.split(',').map(str::to_string).collect(),
            "--json" => o.json = Some(value),
            "--extras" => o.extras = value != "off",
            "--model" => o.model = Some(value),
            "--bandwidth" => o.bandwidth = value.parse::<f64>().map_err(|_| "--bandwidth: GB/s")? * 1e9,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.steps < 2 {
        return Err("--steps: at least 2".into());
    }
    Ok(o)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_decode: {e}");
        std::process::exit(1);
    }
}

type Fallible<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Fills `cache` with `cached` positions of every sequence (one prefill step) and returns it at that length.
fn fill(model: &Llama, cache: &mut KvCache, cached: usize) -> Fallible<()> {
    cache.clear();
    let b = cache.batch();
    let inputs = StepInputs::new(b, cached, model.device())?;
    let vocab = model.config.vocab;
    let ids: Vec<u32> = (0..b * cached).map(|i| (i * 7919 % vocab) as u32).collect();
    inputs.set(&ids, 0)?;
    model.step(&inputs, cache, Fusion::On)?;
    cache.advance_by(cached)?;
    Ok(())
}

/// What the tuner chose for every GEMM group at `rows` rows, as `group=path (us)`: the step's kernel count
/// and time follow from it (a library path needs its own prologue and epilogue kernels).
fn tuned_paths(rows: usize) -> String {
    let bucket = rows.next_power_of_two();
    let mut out: Vec<String> = fuse::tune::results()
        .into_iter()
        .filter(|e| e.rows_bucket == bucket)
        .map(|e| format!("{}={} ({:.1} us)", e.group, e.choice, e.micros))
        .collect();
    out.sort();
    if out.is_empty() {
        "none timed (from a results file, or FUSE_AUTOTUNE=off)".into()
    } else {
        out.join(", ")
    }
}

/// Decode us per token in `mode`, from `cached` positions on.
fn decode(model: &Llama, cache: &mut KvCache, cached: usize, steps: usize, mode: &str) -> Fallible<f64> {
    if !["graph", "task-graph", "generated", "calls", "unfused", "one-launch"].contains(&mode) {
        return Err(format!("unknown mode `{mode}` (graph, task-graph, generated, calls, unfused, one-launch)").into());
    }
    let b = cache.batch();
    fill(model, cache, cached)?;
    if mode == "one-launch" {
        if b != 1 {
            return Err("the one-launch step decodes one sequence".into());
        }
        let mut step = DecodeStepWeights::random(&model.config, 1)?.kernel(model.device())?;
        step.set_caches(cache.layers())?;
        step.set_token(1)?;
        step.time_steps(cached, 2)?; // compiles, warms
        let us = step.time_steps(cached, steps)?;
        // The host's side of a step (its argument words and one launch), 100 queued back to back.
        let started = Instant::now();
        for _ in 0..100 {
            step.queue(cached, false)?;
        }
        let host = started.elapsed().as_secs_f64() * 1e6 / 100.0;
        step.token()?; // waits for them
        eprintln!("{mode} step, batch 1, {cached} cached: host time of one queued step (one launch) {host:.1} us");
        return Ok(us);
    }
    let first: Vec<u32> = (0..b as u32).collect();
    // A warm step of this shape (compiles, tunes), then back to `cached`.
    let inputs = StepInputs::new(b, 1, model.device())?;
    let fusion = if mode == "unfused" { Fusion::Off } else { Fusion::On };
    inputs.set(&first, cached)?;
    model.step(&inputs, cache, fusion)?;
    let seconds = if ["graph", "task-graph", "generated"].contains(&mode) {
        let mut decoder = match mode {
            "graph" => model.greedy_decoder(cache, fusion)?,
            "task-graph" => model.one_launch_graph_decoder(cache, fusion, true)?,
            _ => model.one_launch_decoder(cache, fusion, true)?,
        };
        if let (Some(report), "generated") = (decoder.one_launch_report(), mode) {
            eprintln!(
                "generated step, batch {b}, {cached} cached: {} of {} launches as tasks of {} persistent kernel(s) on {:?} blocks ({:?} task kernels, {:?} bytes of local memory a thread), {} launches a step; kept: {:?}",
                report.as_tasks,
                report.launches,
                report.step_kernels,
                report.blocks,
                report.task_kernels,
                report.local_bytes,
                report.launches_per_step(),
                report.kept
            );
        } else if let Some(kernels) = decoder.kernel_count()? {
            let layers = model.config.layers;
            eprintln!(
                "recorded step, batch {b}, {cached} cached: {kernels} kernels, {:.1} a layer over {layers} layers",
                kernels as f64 / layers as f64
            );
            eprintln!("  tuned GEMM paths, rows bucket {}: {}", b.next_power_of_two(), tuned_paths(b));
        }
        decoder.set_tokens(&first)?;
        decoder.advance(cache)?; // the first replay uploads the graph's last pieces
        decoder.tokens()?;
        let start = Instant::now();
        for _ in 0..steps {
            decoder.advance(cache)?;
        }
        decoder.tokens()?; // waits for the last step
        start.elapsed().as_secs_f64()
    } else {
        let start = Instant::now();
        for i in 0..steps {
            inputs.set_positions(cached + 1 + i)?;
            let logits = model.step(&inputs, cache, fusion)?;
            if i + 1 == steps {
                logits.to_vec::<f32>()?; // waits for the last step
            }
        }
        start.elapsed().as_secs_f64()
    };
    Ok(seconds * 1e6 / steps as f64)
}

/// Prefill tokens/s of a `prompt`-token prompt (batch 1), the median of five after a warm one.
fn prefill(model: &Llama, prompt: usize) -> Fallible<f64> {
    let mut cache = model.new_cache(prompt)?;
    let mut times = Vec::new();
    for i in 0..6 {
        let start = Instant::now();
        fill(model, &mut cache, prompt)?;
        cache.layer(0).0.narrow(2, 0, 1)?.to_vec::<f32>()?;
        if i > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(prompt as f64 / times[times.len() / 2])
}

/// Normal values of standard deviation `std` (seeded, made on the host), as `dtype` on `device`.
fn random(shape: &[usize], std: f32, seed: u64, dtype: DType, device: &Device) -> Fallible<Tensor> {
    Ok(Tensor::randn_seeded(0.0, std, shape, seed, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)?)
}

/// Host time of one fused call that is not captured, in us: the FFN block of a decoder layer (rms_norm,
/// the gate and up projections, SwiGLU, the down projection, the residual) at one token, queued 100 times
/// without waiting (its launches are replayed from the call's launch plan). The GPU runs behind; the
/// queue does not fill at this count. With `FUSE_HOST_PROFILE=1`, also where that time went, by phase.
fn host_us_per_call(
    config: &Config,
    dtype: DType,
    device: &Device,
) -> Fallible<(f64, Option<fuse::host_profile::HostProfile>)> {
    let w = |shape: &[usize], seed: u64| random(shape, 0.02, seed, dtype, device);
    let (h, i) = (config.hidden, config.intermediate);
    let ffn = FfnBlock { norm: w(&[h], 1)?, gate: w(&[i, h], 2)?, up: w(&[i, h], 3)?, down: w(&[h, i], 4)?, eps: 1e-5 };
    let x = w(&[1, 1, h], 5)?;
    for _ in 0..3 {
        ffn.forward(&x)?.to_vec::<f32>()?;
    }
    let calls = 100;
    fuse::host_profile::take(); // the warm-up calls' phases (and any before) are not counted
    let start = Instant::now();
    let mut last = None;
    for _ in 0..calls {
        last = Some(ffn.forward(&x)?);
    }
    let host = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let profile = fuse::host_profile::take();
    if let Some(y) = last {
        y.to_vec::<f32>()?;
    }
    Ok((host, profile))
}

/// `FUSE_HOST_PROFILE=1`'s line: us a call in each phase of the call, the release of the last call's output
/// (its buffer back to the cache) and what is left of `host` (the wrapper, the frees, the loop).
fn print_host_phases(host: f64, profile: &fuse::host_profile::HostProfile) {
    let phases = profile.us_per_call();
    let release = phases.iter().find(|(name, _)| *name == "release").map_or(0.0, |p| p.1);
    let in_call: f64 = phases.iter().filter(|(name, _)| *name != "release").map(|p| p.1).sum();
    let each: Vec<String> = phases.iter().map(|(name, us)| format!("{name} {us:.2}")).collect();
    println!(
        "  by phase (FUSE_HOST_PROFILE=1, {} calls; its timers add to the time above), us a call: {}; in the call {in_call:.2}, outside it {:.2}",
        profile.calls,
        each.join(", "),
        host - in_call - release
    );
}

/// The output projection alone: one GEMM of a layer (a skinny kernel or a library call).
#[fuse]
fn project(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&w.t()))
}

/// The QKV projection alone with its rms_norm (a skinny kernel running the norm itself).
#[fuse]
fn qkv_projection(x: &Tensor, norm: &Tensor, wqkv: &Tensor, eps: f32) -> Result<Tensor> {
    Ok(rms_norm(x, norm, eps).matmul(&wqkv.t()))
}

/// The FFN's gate and up projections alone with their rms_norm and SwiGLU (the dual GEMM).
#[fuse]
fn gate_up(x: &Tensor, norm: &Tensor, gate: &Tensor, up: &Tensor, eps: f32) -> Result<Tensor> {
    let h = rms_norm(x, norm, eps);
    Ok(silu(h.matmul(&gate.t())) * h.matmul(&up.t()))
}

/// Us a call of `graph`, a recording of `calls` calls: one replay to warm up, then 10 timed (1 on a CPU, where
/// a replay calls the closure).
fn us_per_recorded_call(graph: &mut CudaGraph<'_>, device: &Device, calls: usize) -> Fallible<f64> {
    graph.replay()?;
    device.synchronize()?;
    let replays = if device.is_cuda() { 10 } else { 1 };
    let start = Instant::now();
    for _ in 0..replays {
        graph.replay()?;
    }
    device.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e6 / (replays * calls) as f64)
}

/// Records `calls` calls of `step` as one CUDA graph (on a GPU; called on a CPU), each reading the last one's
/// result (a layer's blocks follow one another so), and returns the us a call of its replays.
fn chained_us(
    device: &Device,
    first: &Tensor,
    calls: usize,
    step: &dyn Fn(&Tensor) -> Fallible<Tensor>,
) -> Fallible<f64> {
    step(first)?.to_vec::<f32>()?; // compiles and tunes before the capture
    let mut graph = CudaGraph::capture(device, || {
        let mut x = first.clone();
        for _ in 0..calls {
            x = step(&x).map_err(|e| fuse::Error::Capture { what: e.to_string() })?;
        }
        Ok(())
    })?;
    us_per_recorded_call(&mut graph, device, calls)
}

/// Each block of a decoder layer alone, at batch 1 with 128 cached positions, 30 chained calls in one CUDA
/// graph (a step's layers): the attention block (QKV GEMM; rope, cache appends and attention; the output
/// projection), the FFN block (dual GEMM, down projection), then one kernel's call alone, 30 in a row: the
/// output projection, the QKV projection with its rms_norm, the dual GEMM with its rms_norm; in us a call.
/// (Attention is the attention block less the QKV and output projections, the down projection the FFN
/// block less the dual GEMM.)
fn block_speeds(config: &Config, dtype: DType, device: &Device) -> Fallible<[f64; 5]> {
    let w = |shape: &[usize], seed: u64| random(shape, 0.02, seed, dtype, device);
    let (h, i, d) = (config.hidden, config.intermediate, config.head_dim);
    let (hq, hkv) = (config.heads, config.kv_heads);
    let (cached, calls) = (128, config.layers);
    let x = random(&[1, 1, h], 1.0, 9, dtype, device)?;
    let ffn = FfnBlock { norm: w(&[h], 1)?, gate: w(&[i, h], 2)?, up: w(&[i, h], 3)?, down: w(&[h, i], 4)?, eps: 1e-5 };
    let ffn_us = chained_us(device, &x, calls, &|x| Ok(ffn.forward(x)?))?;
    let attention = AttentionBlock {
        norm: w(&[h], 5)?,
        wqkv: w(&[(hq + 2 * hkv) * d, h], 6)?,
        wo: w(&[h, h], 7)?,
        eps: 1e-5,
        scale: 1.0 / (d as f32).sqrt(),
    };
    let (cos, sin) = (random(&[1, d / 2], 1.0, 10, dtype, device)?, random(&[1, d / 2], 1.0, 11, dtype, device)?);
    let (k_cache, v_cache) = (
        random(&[1, hkv, cached + 1, d], 1.0, 12, dtype, device)?,
        random(&[1, hkv, cached + 1, d], 1.0, 13, dtype, device)?,
    );
    let at = Tensor::from_vec(vec![cached as u32], &[1], device)?;
    let lens = Tensor::from_vec(vec![cached as u32 + 1], &[1], device)?;
    let attention_us = chained_us(device, &x, calls, &|x| {
        Ok(attention.forward(
            x,
            &cos,
            &sin,
            &k_cache,
            &v_cache,
            &at,
            &lens,
            1,
            1,
            hq,
            hkv,
            hq + 2 * hkv,
            hq + hkv,
            d,
            h,
        )?)
    })?;
    let wo = w(&[h, h], 14)?;
    let project_us = chained_us(device, &x, calls, &|x| Ok(project(x, &wo)?))?;
    // One kernel's call repeated (each reads the same input: the kernels still run one after the other).
    let qkv_us = chained_us(device, &x, calls, &|_| Ok(qkv_projection(&x, &attention.norm, &attention.wqkv, 1e-5)?))?;
    let gate_up_us = chained_us(device, &x, calls, &|_| Ok(gate_up(&x, &ffn.norm, &ffn.gate, &ffn.up, 1e-5)?))?;
    Ok([attention_us, ffn_us, project_us, qkv_us, gate_up_us])
}

/// Decode attention alone (`attention_len`, one query a sequence over `cached` keys of a [batch, 3, cached,
/// 64] cache, SmolLM2's heads), 20 calls recorded as one CUDA graph (on a GPU; called on a CPU) and
/// replayed: us per call and GB/s of keys and values read.
fn attention_speed(batch: usize, cached: usize, dtype: DType, device: &Device) -> Fallible<(f64, f64)> {
    let rand = |shape: &[usize], seed: u64| random(shape, 1.0, seed, dtype, device);
    let (hq, hkv, d) = (9, 3, 64);
    let q = rand(&[batch, hq, 1, d], 1)?;
    let (k, v) = (rand(&[batch, hkv, cached, d], 2)?, rand(&[batch, hkv, cached, d], 3)?);
    let lens = Tensor::from_vec(vec![cached as u32; batch], &[batch], device)?;
    let scale = 1.0 / (d as f64).sqrt();
    attention_len(&q, &k, &v, &lens, scale, true)?.to_vec::<f32>()?; // compiles; the counters are made
    let calls = 20;
    let out = std::cell::RefCell::new(None);
    let mut graph = CudaGraph::capture(device, || {
        for _ in 0..calls {
            *out.borrow_mut() = Some(attention_len(&q, &k, &v, &lens, scale, true)?);
        }
        Ok(())
    })?;
    let us = us_per_recorded_call(&mut graph, device, calls)?;
    let bytes = 2 * batch * hkv * cached * d * dtype.size_bytes();
    Ok((us, bytes as f64 / us / 1e3))
}

fn run() -> Fallible<()> {
    let o = parse()?;
    let device = match o.device.as_str() {
        "best" => Device::cuda_if_available(0),
        "cpu" => Device::Cpu,
        "cuda" => Device::cuda(0)?,
        other => return Err(format!("--device: `{other}` is not cpu or cuda").into()),
    };
    let (model, weight_bytes) = match &o.model {
        None => {
            let model = Llama::random(&Config::smollm2_135m(), &device, o.dtype, 1)?;
            let bytes = model.parameters() * o.dtype.size_bytes();
            println!(
                "SmolLM2-135M-shaped decoder, random weights, {} on {device}, {:.0} MB of weights",
                o.dtype,
                bytes as f64 / 1e6
            );
            (model, bytes)
        }
        Some(path) => {
            let file = fuse_models::gguf::GgufFile::open_for(path, &device)?;
            let model = Llama::load_stored_as(&file, &device, o.dtype)?;
            let (in_place, held) = model.weight_bytes();
            let c = &model.config;
            println!(
                "{path}: {:?}, hidden {}, {} layers, {}/{} heads of {}, vocabulary {}; weights as stored, \
                 activations {} on {device}: {:.1} MB of weights ({:.1} MB read in place, {:.1} MB held)",
                c.architecture,
                c.hidden,
                c.layers,
                c.heads,
                c.kv_heads,
                c.head_dim,
                c.vocab,
                o.dtype,
                (in_place + held) as f64 / 1e6,
                in_place as f64 / 1e6,
                held as f64 / 1e6
            );
            (model, (in_place + held) as usize)
        }
    };
    let config = model.config.clone();
    println!(
        "{:<8} {:>5} {:>7} {:>12} {:>10} {:>10} {:>9}",
        "mode", "batch", "cached", "us/token", "tokens/s", "floor us", "x floor"
    );
    let mut rows = Vec::new();
    for &b in &o.batches {
        for &cached in &o.cached {
            let mut cache = model.new_batch_cache(b, cached + o.steps + 4)?;
            // The floor: every weight and the cache so far read once per step, at the copy bandwidth.
            let cache_bytes = 2 * config.layers * b * config.kv_heads * config.head_dim * cached * o.dtype.size_bytes();
            let floor = (weight_bytes + cache_bytes) as f64 / o.bandwidth * 1e6;
            for mode in &o.modes {
                if mode == "one-launch" && b != 1 {
                    continue; // one sequence only
                }
                let us = match decode(&model, &mut cache, cached, o.steps, mode) {
                    Ok(us) => us,
                    Err(e) => {
                        println!("{mode:<8} {b:>5} {cached:>7} failed: {e}");
                        continue;
                    }
                };
                println!(
                    "{mode:<8} {b:>5} {cached:>7} {us:>12.1} {:>10.0} {floor:>10.1} {:>9.1}",
                    b as f64 * 1e6 / us,
                    us / floor
                );
                rows.push(format!(
                    "{{\"mode\": \"{mode}\", \"batch\": {b}, \"cached\": {cached}, \"us_per_token\": {us:.3}, \"floor_us\": {floor:.3}}}"
                ));
            }
        }
    }
    if !o.extras || o.model.is_some() {
        // Decode steps only (e.g. under a profiler), or a file's decode and prefill: the JSON keeps its fields.
        let prefill = match (&o.model, o.extras) {
            (Some(_), true) => {
                let tps = prefill(&model, o.prompt)?;
                println!("prefill  {} tokens (batch 1): {tps:.0} tokens/s", o.prompt);
                format!("{{\"tokens\": {}, \"tokens_per_s\": {tps:.3}}}", o.prompt)
            }
            _ => "null".into(),
        };
        if let Some(path) = &o.json {
            let model = o.model.as_deref().map_or("null".into(), |m| format!("\"{m}\""));
            let body = format!(
                "{{\"device\": \"{device}\", \"model\": {model}, \"weight_bytes\": {weight_bytes}, \"dtype\": \"{}\", \"steps\": {}, \"decode\": [{}], \"prefill\": {prefill}, \"host_us_per_call\": null, \"attention\": null}}\n",
                o.dtype,
                o.steps,
                rows.join(", ")
            );
            std::fs::write(path, body)?;
        }
        return Ok(());
    }
    let tps = prefill(&model, o.prompt)?;
    println!("prefill  {} tokens (batch 1): {tps:.0} tokens/s", o.prompt);
    let (host, profile) = host_us_per_call(&config, o.dtype, &device)?;
    let how = if device.is_cuda() { "the FFN block, launch plan replayed" } else { "the FFN block, run on the CPU" };
    println!("host time of one fused call, not captured ({how}): {host:.1} us");
    if let Some(profile) = &profile {
        print_host_phases(host, profile);
    }
    let [attention_block, ffn_block, projection, qkv, gate_up] = block_speeds(&config, o.dtype, &device)?;
    let inside = if device.is_cuda() { "in a CUDA graph of 30 chained calls" } else { "30 chained calls on the CPU" };
    println!("one layer's blocks {inside}, batch 1, 128 cached: attention block {attention_block:.1} us a call, FFN block {ffn_block:.1} us, the output projection alone {projection:.1} us");
    println!(
        "  one kernel alone, 30 in a row: QKV projection with rms_norm {qkv:.1} us, dual GEMM with rms_norm {gate_up:.1} us; so attention (rope, appends) about {:.1} us, the down projection about {:.1} us",
        attention_block - qkv - projection,
        ffn_block - gate_up
    );
    let mut attention = Vec::new();
    // Batch 16 over 8192 keys takes minutes on a CPU: the GPU only there.
    let shapes: &[(usize, usize)] =
        if device.is_cuda() { &[(1, 1024), (1, 8192), (16, 1024), (16, 8192)] } else { &[(1, 1024), (1, 8192)] };
    for &(b, cached) in shapes {
        let (us, gbs) = attention_speed(b, cached, o.dtype, &device)?;
        println!(
            "attention_len decode, batch {b:>2}, {cached:>5} cached: {us:8.1} us, {gbs:7.1} GB/s of keys and values"
        );
        attention.push(format!("{{\"batch\": {b}, \"cached\": {cached}, \"us\": {us:.3}, \"gb_per_s\": {gbs:.3}}}"));
    }
    if let Some(path) = &o.json {
        let body = format!(
            "{{\"device\": \"{device}\", \"dtype\": \"{}\", \"steps\": {}, \"decode\": [{}], \"prefill\": {{\"tokens\": {}, \"tokens_per_s\": {tps:.3}}}, \"host_us_per_call\": {host:.3}, \"blocks_us\": {{\"attention\": {attention_block:.3}, \"ffn\": {ffn_block:.3}, \"projection\": {projection:.3}, \"qkv\": {qkv:.3}, \"gate_up\": {gate_up:.3}}}, \"attention\": [{}]}}\n",
            o.dtype,
            o.steps,
            rows.join(", "),
            o.prompt,
            attention.join(", ")
        );
        std::fs::write(path, body)?;
    }
    Ok(())
}
