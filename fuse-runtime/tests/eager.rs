//! Every eager op, in every dtype, on odd shapes, against the f64 reference interpreter.

mod common;

use common::*;
use fuse_ir::{BinaryOp, DType, Graph, InputKind, ReduceOp, UnaryOp};
use fuse_runtime::*;

const SHAPES: [&[usize]; 5] = [&[1], &[3, 17], &[127], &[2, 3, 17], &[17, 1]];

/// The reference for a one-op graph built by `build` over tensor inputs.
fn reference(
    inputs: &[&Tensor],
    build: impl FnOnce(&mut Graph, &[fuse_ir::NodeId]) -> fuse_ir::NodeId,
) -> fuse_ir::interp::Array {
    let mut g = Graph::new("reference");
    let ids: Vec<_> = (0..inputs.len()).map(|i| g.input(&format!("x{i}"), InputKind::Tensor)).collect();
    let out = build(&mut g, &ids);
    g.outputs = vec![out];
    let arrays: Vec<_> = inputs.iter().map(|t| array(t)).collect();
    fuse_ir::interp::eval(&g, &arrays).expect("reference").remove(0)
}

fn assert_close(got: &Tensor, want: &fuse_ir::interp::Array, dtype: DType, what: &str) {
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    let e = rel_l2(got, want);
    assert!(e <= tolerance(dtype), "{what} ({dtype}): relative error {e:e}");
}

#[test]
fn unary_ops_match_the_reference() {
    type EagerOp = fn(&Tensor) -> Result<Tensor>;
    let ops: [(UnaryOp, EagerOp); 16] = [
        (UnaryOp::Exp, exp),
        (UnaryOp::Log, log),
        (UnaryOp::Sqrt, sqrt),
        (UnaryOp::Rsqrt, rsqrt),
        (UnaryOp::Tanh, tanh),
        (UnaryOp::Sigmoid, sigmoid),
        (UnaryOp::Silu, silu),
        (UnaryOp::Gelu, gelu),
        (UnaryOp::GeluTanh, gelu_tanh),
        (UnaryOp::Relu, relu),
        (UnaryOp::Abs, abs),
        (UnaryOp::Square, square),
        (UnaryOp::Recip, recip),
        (UnaryOp::Sin, sin),
        (UnaryOp::Cos, cos),
        (UnaryOp::Trunc, trunc),
    ];
    let mut r = rng(1);
    for dtype in DType::ALL {
        for shape in SHAPES {
            for (op, f) in ops {
                let positive = matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt);
                let x = tensor_in(&mut r, shape, dtype, positive);
                let want = reference(&[&x], |g, i| g.unary(op, i[0], ""));
                assert_close(&f(&x).unwrap(), &want, dtype, op.name());
            }
            let x = tensor(&mut r, shape, dtype);
            let want = reference(&[&x], |g, i| g.unary(UnaryOp::Neg, i[0], ""));
            assert_close(&(-&x).unwrap(), &want, dtype, "neg");
            assert_close(&(-x.clone()).unwrap(), &want, dtype, "neg (owned)");
        }
    }
}

#[test]
fn binary_ops_broadcast_like_numpy() {
    let pairs: [(&[usize], &[usize]); 5] =
        [(&[3, 17], &[3, 17]), (&[3, 17], &[17]), (&[3, 1], &[1, 17]), (&[2, 3, 17], &[3, 1]), (&[1], &[127])];
    let mut r = rng(2);
    for dtype in DType::ALL {
        for (sa, sb) in pairs {
            let a = tensor(&mut r, sa, dtype);
            let b = tensor(&mut r, sb, dtype);
            let cases: [(BinaryOp, Result<Tensor>); 12] = [
                (BinaryOp::Add, &a + &b),
                (BinaryOp::Sub, &a - &b),
                (BinaryOp::Mul, &a * &b),
                (BinaryOp::Div, &a / &b),
                (BinaryOp::Maximum, maximum(&a, &b)),
                (BinaryOp::Minimum, minimum(&a, &b)),
                (BinaryOp::Ge, a.ge(&b)),
                (BinaryOp::Gt, a.gt(&b)),
                (BinaryOp::Le, a.le(&b)),
                (BinaryOp::Lt, a.lt(&b)),
                (BinaryOp::Eq, a.eq(&b)),
                (BinaryOp::Ne, a.ne(&b)),
            ];
            for (op, got) in cases {
                let want = reference(&[&a, &b], |g, i| g.binary(op, i[0], i[1], ""));
                assert_close(&got.unwrap(), &want, dtype, op.name());
            }
        }
    }
}

#[test]
fn where_cond_selects_with_broadcasting() {
    let triples: [(&[usize], &[usize], &[usize]); 4] = [
        (&[3, 17], &[3, 17], &[3, 17]),
        (&[3, 1], &[17], &[3, 17]),
        (&[2, 1, 17], &[3, 1], &[1]),
        (&[127], &[1], &[127]),
    ];
    let mut r = rng(21);
    for dtype in DType::ALL {
        for (sc, st, sf) in triples {
            // A 0/1 condition in f32 (a condition's dtype is free), the values in `dtype`.
            let c = tensor(&mut r, sc, DType::F32).gt(&Tensor::zeros(&[1], DType::F32, &Device::Cpu).unwrap()).unwrap();
            let (t, f) = (tensor(&mut r, st, dtype), tensor(&mut r, sf, dtype));
            let want = reference(&[&c, &t, &f], |g, i| g.where_cond(i[0], i[1], i[2], ""));
            assert_close(&c.where_cond(&t, &f).unwrap(), &want, dtype, "where_cond");
        }
    }
    // -inf where masked, NaN and any non-zero number count as true.
    let dev = Device::Cpu;
    let c = Tensor::from_vec(vec![1.0f32, 0.0, f32::NAN, -2.0], &[4], &dev).unwrap();
    let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4], &dev).unwrap();
    let f = Tensor::full(f32::NEG_INFINITY, &[1], DType::F32, &dev).unwrap();
    assert_eq!(c.where_cond(&t, &f).unwrap().to_vec::<f32>().unwrap(), [1.0, f32::NEG_INFINITY, 3.0, 4.0]);
    let e = c.where_cond(&t, &f.to_dtype(DType::BF16).unwrap()).unwrap_err().to_string();
    assert!(e.contains("f32") && e.contains("bf16"), "values of two dtypes: {e}");
    let e = c.where_cond(&Tensor::zeros(&[3], DType::F32, &dev).unwrap(), &f).unwrap_err().to_string();
    assert!(e.contains("[4]") && e.contains("[3]"), "shapes that do not broadcast: {e}");
}

#[test]
fn operators_take_every_operand_form() {
    let mut r = rng(3);
    let a = tensor(&mut r, &[3, 17], DType::F32);
    let b = tensor(&mut r, &[17], DType::F32);
    let c = tensor(&mut r, &[3, 1], DType::F32);
    let want_abc = reference(&[&a, &b, &c], |g, i| {
        let s = g.binary(BinaryOp::Add, i[0], i[1], "");
        g.binary(BinaryOp::Mul, s, i[2], "")
    });
    let forms = [
        ((&a + &b).unwrap() * &c).unwrap(),
        ((&a + &b) * &c).unwrap(),
        ((a.clone() + b.clone()) * c.clone()).unwrap(),
        (&c * (&a + &b)).unwrap(),
        (c.clone() * (a.clone() + &b)).unwrap(),
        ((&a + b.clone()) * c.clone()).unwrap(),
    ];
    for (i, got) in forms.iter().enumerate() {
        assert_close(got, &want_abc, DType::F32, &format!("form {i}"));
    }
    // Scalars on either side, f32 and f64.
    let two = |f: fn(f64, f64) -> f64| -> fuse_ir::interp::Array {
        let v = array(&a);
        fuse_ir::interp::Array::new(v.shape.clone(), v.data.iter().map(|&x| f(x, 2.5)).collect())
    };
    assert_close(&(&a + 2.5f32).unwrap(), &two(|x, s| x + s), DType::F32, "a + s");
    assert_close(&(a.clone() - 2.5f64).unwrap(), &two(|x, s| x - s), DType::F32, "a - s");
    assert_close(&(2.5f32 - &a).unwrap(), &two(|x, s| s - x), DType::F32, "s - a");
    assert_close(&(2.5f64 / a.clone()).unwrap(), &two(|x, s| s / x), DType::F32, "s / a");
    assert_close(&(&a * 2.5f64).unwrap(), &two(|x, s| x * s), DType::F32, "a * s");
    assert_close(&(a.clone() / 2.5f32).unwrap(), &two(|x, s| x / s), DType::F32, "a / s");
    // An error on the left passes through.
    let bad = &a + &tensor(&mut r, &[5], DType::F32);
    assert!((bad * &b).is_err());
}

#[test]
fn reductions_keep_the_last_axis() {
    let mut r = rng(4);
    for dtype in DType::ALL {
        for shape in SHAPES {
            let x = tensor(&mut r, shape, dtype);
            let all = [
                (ReduceOp::Sum, x.sum(-1)),
                (ReduceOp::Mean, x.mean(-1)),
                (ReduceOp::Max, x.max(-1)),
                (ReduceOp::Min, x.min(-1)),
            ];
            for (op, got) in all {
                let want = reference(&[&x], |g, i| g.reduce(op, i[0], ""));
                let got = got.unwrap();
                let mut want_shape = shape.to_vec();
                *want_shape.last_mut().unwrap() = 1;
                assert_eq!(got.shape(), want_shape.as_slice());
                assert_close(&got, &want, dtype, op.name());
            }
            let last = shape.len() as i64 - 1;
            assert_close(
                &x.sum(last).unwrap(),
                &reference(&[&x], |g, i| g.reduce(ReduceOp::Sum, i[0], "")),
                dtype,
                "sum(rank-1)",
            );
        }
    }
}

#[test]
fn composites_softmax_and_rms_norm() {
    let mut r = rng(5);
    for dtype in DType::ALL {
        for shape in [&[1usize][..], &[3, 17], &[2, 3, 127]] {
            let x = tensor(&mut r, shape, dtype);
            let want = reference(&[&x], |g, i| g.softmax(i[0], ""));
            assert_close(&softmax(&x).unwrap(), &want, dtype, "softmax");
            let w = tensor(&mut r, &shape[shape.len() - 1..], dtype);
            let mut g = Graph::new("rms");
            let (xi, wi, ei) =
                (g.input("x", InputKind::Tensor), g.input("w", InputKind::Tensor), g.input("eps", InputKind::Scalar));
            let o = g.rms_norm(xi, wi, ei, "");
            g.outputs = vec![o];
            let want = fuse_ir::interp::eval(&g, &[array(&x), array(&w), fuse_ir::interp::Array::scalar(1e-5)])
                .unwrap()
                .remove(0);
            assert_close(&rms_norm(&x, &w, 1e-5f32).unwrap(), &want, dtype, "rms_norm");
        }
    }
}

#[test]
fn powf_and_matmul_in_every_dtype() {
    let mut r = rng(6);
    for dtype in DType::ALL {
        let x = tensor_in(&mut r, &[3, 17], dtype, true);
        let want = reference(&[&x], |g, i| {
            let e = g.constant(1.7);
            g.binary(BinaryOp::Pow, i[0], e, "")
        });
        assert_close(&x.powf(1.7).unwrap(), &want, dtype, "powf");
        for (sa, sb) in [
            (&[17usize, 33][..], &[33usize, 5][..]),
            (&[1, 127], &[127, 3]),
            (&[3, 17, 33], &[33, 5]),
            (&[2, 17, 33], &[2, 33, 5]),
        ] {
            let a = tensor(&mut r, sa, dtype);
            let b = tensor(&mut r, sb, dtype);
            let want = reference(&[&a, &b], |g, i| g.matmul(i[0], i[1], ""));
            assert_close(&a.matmul(&b).unwrap(), &want, dtype, "matmul");
        }
    }
}

#[test]
fn transposed_views_read_through_strides() {
    let mut r = rng(7);
    for dtype in DType::ALL {
        let w = tensor(&mut r, &[5, 33], dtype);
        let wt = w.t().unwrap();
        assert_eq!(wt.shape(), &[33, 5]);
        assert!(!wt.is_contiguous());
        let x = tensor(&mut r, &[17, 33], dtype);
        let want = reference(&[&x, &w], |g, i| {
            let t = g.transpose(i[1], "");
            g.matmul(i[0], t, "")
        });
        assert_close(&x.matmul(&wt).unwrap(), &want, dtype, "x.matmul(w.t())");
        // Pointwise on a view, and to_vec of a view.
        let y = tensor(&mut r, &[33, 5], dtype);
        let want = reference(&[&w, &y], |g, i| {
            let t = g.transpose(i[0], "");
            g.binary(BinaryOp::Add, t, i[1], "")
        });
        assert_close(&(&wt + &y).unwrap(), &want, dtype, "w.t() + y");
        let dense = w.to_vec::<f32>().unwrap();
        let viewed = wt.to_vec::<f32>().unwrap();
        assert_eq!(viewed[5], dense[1], "element [1, 0] of the view is [0, 1] of the tensor");
        assert_eq!(viewed[1], dense[33], "element [0, 1] of the view is [1, 0] of the tensor");
        assert!(wt.t().unwrap().is_contiguous());
    }
}

#[test]
fn conversions_round_trip() {
    let mut r = rng(8);
    let v = values(&mut r, 3 * 17, false);
    let x = Tensor::from_vec(v.clone(), &[3, 17], &Device::Cpu).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), v);
    assert_eq!(x.numel(), 51);
    assert!(x.is_contiguous());
    for dtype in [DType::F16, DType::BF16] {
        let y = x.to_dtype(dtype).unwrap();
        assert_eq!(y.dtype(), dtype);
        let back = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let e = rel_l2(&Tensor::from_vec(back, &[3, 17], &Device::Cpu).unwrap(), &array(&x));
        assert!(e > 0.0 && e < tolerance(dtype), "{dtype} round trip error {e}");
    }
    let h: Vec<half::bf16> = x.to_vec().unwrap();
    assert_eq!(h[4], half::bf16::from_f32(v[4]));
    let from_half = Tensor::from_vec(h.clone(), &[51], &Device::Cpu).unwrap();
    assert_eq!(from_half.dtype(), DType::BF16);
    assert_eq!(from_half.to_vec::<half::bf16>().unwrap(), h);
    assert_eq!(x.to_device(&Device::Cpu).unwrap().device(), &Device::Cpu);
    let shown = format!("{:?}", x);
    assert!(shown.contains("[3, 17]") && shown.contains("f32") && shown.contains("cpu"), "{shown}");
}

#[test]
fn devices() {
    // No machine has this many GPUs, with or without a driver.
    assert!(matches!(Device::cuda(1 << 20), Err(Error::CudaUnavailable { .. })));
    assert_eq!(Device::cuda_if_available(1 << 20), Device::Cpu);
    assert!(!Device::Cpu.is_cuda());
}
