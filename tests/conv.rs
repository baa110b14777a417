//! `x.conv1d(&kernel, padding, stride, dilation, groups)` and `x.conv2d(..)` (candle's names and argument
//! order), eager and inside `#[fuse]`, on the CPU and the GPU, against the reference interpreter (whose
//! convolution fuse-ir's tests check against loops): Whisper's front end (two 1-D convolutions with a bias
//! and GELU after each, the second strided), a ViT patch embedding (stride = kernel), padded, dilated,
//! grouped and depthwise convolutions, in each float dtype; sizes that do not fit are errors.

use fuse::prelude::*;
use fuse::testing::{assert_close, check_against_reference, random, TestRng};

/// Whisper's encoder front end: conv1 (k 3, padding 1), GELU, conv2 (k 3, padding 1, stride 2), GELU.
#[fuse]
fn whisper_front(mel: &Tensor, w1: &Tensor, b1: &Tensor, w2: &Tensor, b2: &Tensor) -> Result<Tensor> {
    let h = gelu(&(mel.conv1d(w1, 1, 1, 1, 1)? + b1.reshape(&[1, b1.dim(0), 1])?)?)?;
    gelu(&(h.conv1d(w2, 1, 2, 1, 1)? + b2.reshape(&[1, b2.dim(0), 1])?)?)
}

/// A ViT patch embedding: conv2d with stride = kernel = patch, then [b, patches, hidden].
#[fuse]
fn patch_embed(image: &Tensor, w: &Tensor, patch: usize) -> Result<Tensor> {
    let p = image.conv2d(w, 0, patch, 1, 1)?;
    Ok(p.reshape(&[p.dim(0), p.dim(1), -1]).transpose(1, 2))
}

/// Any sizes, passed in.
#[fuse]
fn conv_any(x: &Tensor, w: &Tensor, padding: usize, stride: usize, dilation: usize, groups: usize) -> Result<Tensor> {
    Ok(x.conv2d(w, padding, stride, dilation, groups))
}

#[fuse]
fn conv1_any(x: &Tensor, w: &Tensor, padding: usize, stride: usize, dilation: usize, groups: usize) -> Result<Tensor> {
    Ok(x.conv1d(w, padding, stride, dilation, groups))
}

fn convolutions_match_reference(dev: &Device) {
    let mut r = TestRng::new(91);
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        // Whisper-shaped (80 mel bins, a short clip of 37 frames, hidden 24).
        let mel = random(&mut r, &[2, 80, 37], dtype, -1.0, 1.0, dev);
        let (w1, b1) =
            (random(&mut r, &[24, 80, 3], dtype, -0.1, 0.1, dev), random(&mut r, &[24], dtype, -0.1, 0.1, dev));
        let (w2, b2) =
            (random(&mut r, &[24, 24, 3], dtype, -0.2, 0.2, dev), random(&mut r, &[24], dtype, -0.1, 0.1, dev));
        let args = [&mel, &w1, &b1, &w2, &b2].map(fuse::arg);
        check_against_reference(&format!("whisper front {dtype}"), whisper_front_fused(), &args, dtype, dev);
        let fused = whisper_front(&mel, &w1, &b1, &w2, &b2).expect("fused");
        assert_eq!(fused.shape(), &[2, 24, 19]);

        let image = random(&mut r, &[2, 3, 32, 48], dtype, -1.0, 1.0, dev);
        let w = random(&mut r, &[20, 3, 16, 16], dtype, -0.05, 0.05, dev);
        let args = [fuse::arg(&image), fuse::arg(&w), fuse::Arg::Scalar(16.0)];
        check_against_reference(&format!("patch embedding {dtype}"), patch_embed_fused(), &args, dtype, dev);
        assert_eq!(patch_embed(&image, &w, 16).expect("fused").shape(), &[2, 6, 20]);

        // (x, w, [padding, stride, dilation, groups]): padded and strided, dilated, grouped, depthwise.
        let cases: [(&[usize], &[usize], [usize; 4]); 4] = [
            (&[1, 5, 9, 11], &[7, 5, 3, 3], [1, 2, 1, 1]),
            (&[2, 2, 10, 7], &[3, 2, 3, 2], [2, 1, 3, 1]),
            (&[2, 6, 5, 6], &[4, 3, 3, 3], [1, 1, 1, 2]),
            (&[1, 8, 6, 6], &[8, 1, 3, 3], [1, 1, 1, 8]),
        ];
        for (xs, ws, sizes) in cases {
            let (x, w) = (random(&mut r, xs, dtype, -1.0, 1.0, dev), random(&mut r, ws, dtype, -0.5, 0.5, dev));
            let mut args = vec![fuse::arg(&x), fuse::arg(&w)];
            args.extend(sizes.map(|s| fuse::Arg::Scalar(s as f64)));
            check_against_reference(
                &format!("conv2d {xs:?} {ws:?} {sizes:?} {dtype}"),
                conv_any_fused(),
                &args,
                dtype,
                dev,
            );
            let [p, s, d, g] = sizes;
            let eager = x.conv2d(&w, p, s, d, g).expect("eager conv2d");
            assert_close("eager conv2d", &eager, &conv_any(&x, &w, p, s, d, g).expect("fused"), dtype, dev);
            // The same as a 1-D convolution over each row's columns (one row: h = 1).
            let (x1, w1) =
                (x.narrow(2, 0, 1).unwrap().squeeze(2).unwrap(), w.narrow(2, 0, 1).unwrap().squeeze(2).unwrap());
            let mut args = vec![fuse::arg(&x1), fuse::arg(&w1)];
            args.extend(sizes.map(|s| fuse::Arg::Scalar(s as f64)));
            check_against_reference(&format!("conv1d {xs:?} {sizes:?} {dtype}"), conv1_any_fused(), &args, dtype, dev);
        }
    }
    // What does not fit: a kernel past the padded input, channels that the groups do not divide, stride 0.
    let x = Tensor::from_vec(vec![1.0f32; 12], &[1, 3, 4], dev).unwrap();
    let w = Tensor::from_vec(vec![1.0f32; 18], &[2, 3, 3], dev).unwrap();
    assert_eq!(x.conv1d(&w, 0, 1, 1, 1).unwrap().to_vec::<f32>().unwrap(), [9.0; 4]);
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(x.conv1d(&w, 0, 1, 2, 1)).contains("does not fit"), "dilation 2 reaches 5 positions of 4");
    assert!(err(x.conv1d(&w, 0, 1, 1, 2)).contains("groups"));
    assert!(err(x.conv1d(&w, 0, 0, 1, 1)).contains("stride must be an integer of at least 1"));
    assert!(err(x.conv2d(&w, 0, 1, 1, 1)).contains("conv2d takes x [b, c, h, w]"));
}

fuse::device_tests!(convolutions_match_reference);
