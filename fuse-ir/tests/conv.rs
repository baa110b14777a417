//! `Graph::conv` (unfold, a matmul per group, views back) in the reference interpreter against a direct
//! convolution written here as loops, in 1-D and 2-D, with padding, stride, dilation and groups; and the
//! shapes and errors of `unfold`.

use fuse_ir::graph::InputKind;
use fuse_ir::interp::{eval, Array};
use fuse_ir::model_op::unfold::Unfold;
use fuse_ir::Graph;

/// The same convolution, directly: x [b, c, h, w], weights [co, c / groups, kh, kw] (1-D: h = kh = 1,
/// padded along w only).
fn direct(x: &Array, w: &Array, padding: usize, stride: usize, dilation: usize, groups: usize) -> Array {
    let one_d = x.shape.len() == 3;
    let (b, c) = (x.shape[0], x.shape[1]);
    let (h, wd) = if one_d { (1, x.shape[2]) } else { (x.shape[2], x.shape[3]) };
    let (co, cg) = (w.shape[0], w.shape[1]);
    let (kh, kw) = if one_d { (1, w.shape[2]) } else { (w.shape[2], w.shape[3]) };
    let (py, sy) = if one_d { (0, 1) } else { (padding, stride) };
    let oh = (h + 2 * py - dilation * (kh - 1) - 1) / sy + 1;
    let ow = (wd + 2 * padding - dilation * (kw - 1) - 1) / stride + 1;
    let mut out = Vec::new();
    for bi in 0..b {
        for o in 0..co {
            let g = o / (co / groups);
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0.0;
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let y = (oy * sy + ky * dilation) as i64 - py as i64;
                                let xx = (ox * stride + kx * dilation) as i64 - padding as i64;
                                if y < 0 || xx < 0 || y >= h as i64 || xx >= wd as i64 {
                                    continue;
                                }
                                let channel = g * cg + ci;
                                let xv = x.data[((bi * c + channel) * h + y as usize) * wd + xx as usize];
                                acc += xv * w.data[((o * cg + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    let shape = if one_d { vec![b, co, ow] } else { vec![b, co, oh, ow] };
    Array::new(shape, out)
}

fn conv_graph(spatial: usize, sizes: [usize; 4]) -> Graph {
    let mut g = Graph::new("conv");
    let (x, w) = (g.input("x", InputKind::Tensor), g.input("w", InputKind::Tensor));
    let sizes = sizes.map(|s| g.constant(s as f64));
    let out = g.conv(x, w, sizes, spatial, "conv");
    g.outputs = vec![out];
    g
}

fn filled(shape: &[usize], seed: u64) -> Array {
    let n: usize = shape.iter().product();
    let data = (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64) / 500.0 - 1.0).collect();
    Array::new(shape.to_vec(), data)
}

#[test]
fn conv_is_unfold_and_a_matmul_per_group() {
    // (x, w, [padding, stride, dilation, groups]): Whisper's first conv (k 3, padding 1), a strided one, a
    // dilated one, grouped and depthwise ones; 2-D: ViT's patches (stride = kernel), padded, grouped.
    let cases: [(&[usize], &[usize], [usize; 4]); 8] = [
        (&[2, 3, 11], &[5, 3, 3], [1, 1, 1, 1]),
        (&[1, 4, 13], &[6, 4, 3], [1, 2, 1, 1]),
        (&[2, 2, 9], &[4, 2, 2], [0, 1, 3, 1]),
        (&[2, 6, 7], &[4, 3, 3], [2, 1, 1, 2]),
        (&[1, 4, 8], &[4, 1, 4], [3, 1, 1, 4]),
        (&[2, 3, 8, 8], &[5, 3, 4, 4], [0, 4, 1, 1]),
        (&[1, 2, 7, 5], &[3, 2, 3, 2], [1, 2, 2, 1]),
        (&[2, 4, 5, 6], &[6, 2, 3, 3], [1, 1, 1, 2]),
    ];
    for (i, (xs, ws, sizes)) in cases.into_iter().enumerate() {
        let (x, w) = (filled(xs, i as u64), filled(ws, 10 + i as u64));
        let got = eval(&conv_graph(xs.len() - 2, sizes), &[x.clone(), w.clone()]).expect("conv");
        let [p, s, d, groups] = sizes;
        let want = direct(&x, &w, p, s, d, groups);
        assert_eq!(got[0].shape, want.shape, "case {i}");
        for (k, (a, b)) in got[0].data.iter().zip(&want.data).enumerate() {
            assert!((a - b).abs() < 1e-9, "case {i}, element {k}: {a} against {b}");
        }
    }
}

#[test]
fn unfold_shapes_and_errors() {
    let some = |v: [f64; 4]| [None, None, Some(v[0]), Some(v[1]), Some(v[2]), Some(v[3])];
    let u = Unfold::of(1, &[2, 6, 10], &[4, 3, 3], &some([1.0, 2.0, 1.0, 2.0])).unwrap();
    assert_eq!(u.shape(), vec![2, 2, 5, 9], "groups, b, (10 + 2 - 3) / 2 + 1 positions, 3 channels x 3");
    let u = Unfold::of(2, &[1, 3, 224, 224], &[768, 3, 16, 16], &some([0.0, 16.0, 1.0, 1.0])).unwrap();
    assert_eq!(u.shape(), vec![1, 1, 14, 14, 768]);
    let err =
        |x: &[usize], w: &[usize], s: [f64; 4]| Unfold::of(x.len() as u8 - 2, x, w, &some(s)).unwrap_err().to_string();
    assert!(err(&[1, 3, 2], &[4, 3, 5], [0.0, 1.0, 1.0, 1.0]).contains("does not fit"));
    assert!(err(&[1, 6, 9], &[4, 3, 3], [0.0, 1.0, 1.0, 1.0]).contains("groups"));
    assert!(err(&[1, 6, 9], &[3, 3, 3], [0.0, 1.0, 1.0, 2.0]).contains("groups"), "outputs not divisible");
    assert!(err(&[1, 3, 9], &[4, 3, 3], [0.0, 0.0, 1.0, 1.0]).contains("stride must be an integer of at least 1"));
    assert!(err(&[1, 3, 9], &[4, 3, 3, 3], [0.0, 1.0, 1.0, 1.0]).contains("conv1d takes x [b, c, l]"));
    assert!(Unfold::of(2, &[1, 3, 9], &[4, 3, 3], &some([0.0, 1.0, 1.0, 1.0]))
        .unwrap_err()
        .to_string()
        .contains("conv2d takes"));
    assert!(Unfold::of(1, &[1, 3, 9], &[4, 3, 3], &[None; 6]).unwrap_err().to_string().contains("padding must be"));
}
