// The prelude's `Result` takes an optional error type, so std's two-parameter form still works in a file
// that glob-imports the prelude.
use fuse::prelude::*;

fn parse_rows(s: &str) -> Result<usize, String> {
    s.trim().parse::<usize>().map_err(|e| format!("rows: {e}"))
}

#[fuse]
fn double(x: &Tensor) -> Result<Tensor> {
    Ok(x * 2.0)
}

fn main() {
    assert_eq!(parse_rows(" 3 "), Ok(3));
    let x = Tensor::ones(&[parse_rows("2").unwrap(), 3], DType::F32, &Device::Cpu).unwrap();
    assert_eq!(double(&x).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 6]);
}
