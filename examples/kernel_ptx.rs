//! Prints the PTX of one of the hand-written model kernels, compiled by NVRTC as fuse compiles it at run time,
//! for reading its code without a GPU (`scripts/sass.sh` assembles it and prints its SASS):
//!
//! ```text
//! cargo run --example kernel_ptx -- KERNEL [--dtype f32|f16|bf16|u32] [--arch sm_90] [-DNAME=VALUE ...]
//! ```
//! KERNEL is a symbol of `fuse::ir::codegen::ModelKernel` (`fuse_model_attention_decode`, ...); `-D` defines
//! are added after the dtype's (the attention kernels need `-DFUSE_ATTENTION_D=64`, 128 or 256).

use fuse::ir::codegen::ModelKernel;
use fuse::DType;

fn main() {
    if let Err(e) = run() {
        eprintln!("kernel_ptx: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().ok_or("usage: kernel_ptx KERNEL [--dtype bf16] [--arch sm_90] [-DNAME=VALUE ...]")?;
    let kernel = ModelKernel::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
        let names: Vec<&str> = ModelKernel::ALL.iter().map(|k| k.name()).collect();
        format!("no model kernel is named {name}; there are {}", names.join(", "))
    })?;
    let (mut dtype, mut arch, mut extra) = (DType::BF16, "sm_90".to_string(), Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dtype" => {
                dtype = match args.next().as_deref() {
                    Some("f32") => DType::F32,
                    Some("f16") => DType::F16,
                    Some("bf16") => DType::BF16,
                    Some("u32") => DType::U32,
                    other => return Err(format!("--dtype: {other:?} is not f32, f16, bf16 or u32")),
                }
            }
            "--arch" => arch = args.next().ok_or("--arch needs a value such as sm_90")?,
            define if define.starts_with("-D") => extra.push(define.to_string()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let defines = [ModelKernel::defines(dtype), extra].concat();
    let ptx = fuse::compile_ptx(kernel.name(), kernel.source(), &defines, &arch).map_err(|e| e.to_string())?;
    print!("{ptx}");
    Ok(())
}
