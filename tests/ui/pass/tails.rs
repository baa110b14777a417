use fuse::prelude::*;

#[fuse]
fn with_ok(x: &Tensor) -> Result<Tensor> {
    Ok(x.exp())
}

#[fuse]
fn without_ok(x: &Tensor) -> Result<Tensor> {
    x.exp()
}

#[fuse]
fn final_return(x: &Tensor) -> Result<Tensor> {
    let y = x.exp()?;
    return Ok(y);
}

#[fuse]
fn scoped(x: &Tensor) -> Result<Tensor> {
    let y = {
        let t = x * 2.0;
        t.exp()
    };
    let y = y + 1.0;
    Ok(y)
}

#[derive(Debug)]
struct MyError;

impl From<fuse::Error> for MyError {
    fn from(_: fuse::Error) -> Self {
        MyError
    }
}

#[fuse]
fn custom_error(x: &Tensor) -> std::result::Result<Tensor, MyError> {
    Ok(x.exp())
}

fn main() {
    let _ = (with_ok, without_ok, final_return, scoped, custom_error);
}
