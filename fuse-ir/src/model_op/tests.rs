use super::*;
use crate::infer::{infer_dtypes, infer_shapes};
use crate::interp::{eval, Array};
use crate::plan::{GroupKind, Plan};
use crate::{BinaryOp, Graph, InputKind, UnaryOp};

fn model_graph(op: ModelOp) -> Graph {
    let mut g = Graph::new("f");
    let names = ["a", "b", "c", "scale", "lens", "f"];
    // Scalars: attention's scale; unfold's four sizes.
    let scalar = |i: usize| {
        if op == (ModelOp::Unfold { spatial: 1 }) || op == (ModelOp::Unfold { spatial: 2 }) {
            i >= 2
        } else {
            i == 3
        }
    };
    let args: Vec<_> = (0..op.arity())
        .map(|i| g.input(names[i], if scalar(i) { InputKind::Scalar } else { InputKind::Tensor }))
        .collect();
    let out = g.model(op, &args, op.name());
    g.outputs = vec![out];
    g
}

#[test]
fn every_model_op_round_trips_through_text() {
    for op in ModelOp::ALL {
        let text = op.to_text();
        let mut words = text.split_whitespace();
        let name = words.next().unwrap();
        assert_eq!(ModelOp::parse(name, &mut words), Some(op));
        let g = model_graph(op);
        let back = Graph::parse(&g.to_text()).unwrap();
        assert_eq!(back.nodes, g.nodes, "{}", g.to_text());
    }
    assert!(Graph::parse("fn f(a: tensor)\n%0 = input 0\n%1 = attention %0 %0 %0 %0\nreturn %1").is_err());
    // With lens: five arguments, and no other word after the flag.
    let lens = "fn f(a: tensor)\n%0 = input 0\n%1 = attention causal=true lens %0 %0 %0 %0 %0\nreturn %1";
    assert!(Graph::parse(lens).is_ok());
    assert!(Graph::parse(&lens.replace(" %0\nreturn", "\nreturn")).is_err(), "four arguments");
    assert!(Graph::parse(&lens.replace("lens", "lengths")).is_err());
}

#[test]
fn shapes_follow_each_op() {
    let shape = |op: ModelOp, args: &[&[usize]]| op.infer_shape(args, &[]);
    assert_eq!(shape(ModelOp::Embedding, &[&[2, 3], &[10, 4]]), Ok(vec![2, 3, 4]));
    assert_eq!(shape(ModelOp::Embedding, &[&[], &[10, 4]]), Ok(vec![4]));
    assert!(shape(ModelOp::Embedding, &[&[2], &[10, 4, 1]]).is_err());
    assert_eq!(shape(ModelOp::Argmax, &[&[2, 7]]), Ok(vec![2, 1]));
    assert!(shape(ModelOp::Argmax, &[&[2, 0]]).is_err());
    assert!(shape(ModelOp::Argmax, &[&[]]).is_err());
    assert_eq!(shape(ModelOp::Rope, &[&[2, 5, 8], &[5, 4], &[5, 4]]), Ok(vec![2, 5, 8]));
    assert!(shape(ModelOp::Rope, &[&[2, 5, 7], &[5, 3], &[5, 3]]).is_err(), "odd d");
    assert!(shape(ModelOp::Rope, &[&[2, 5, 8], &[4, 4], &[4, 4]]).is_err(), "seq differs");
    let full = ModelOp::Attention { causal: false, with_lens: false };
    let causal = ModelOp::Attention { causal: true, with_lens: false };
    assert_eq!(shape(full, &[&[2, 9, 3, 8], &[2, 3, 5, 8], &[2, 3, 5, 8], &[]]), Ok(vec![2, 9, 3, 8]));
    assert!(shape(full, &[&[2, 8, 3, 8], &[2, 3, 5, 8], &[2, 3, 5, 8], &[]]).is_err(), "hq not a multiple");
    assert!(shape(full, &[&[2, 9, 3, 8], &[2, 3, 5, 8], &[2, 3, 4, 8], &[]]).is_err(), "k and v differ");
    assert!(shape(full, &[&[2, 9, 3, 8], &[2, 3, 5, 8], &[2, 3, 5, 8], &[1]]).is_err(), "scale is a tensor");
    assert!(shape(causal, &[&[1, 1, 6, 8], &[1, 1, 5, 8], &[1, 1, 5, 8], &[]]).is_err(), "more queries than keys");
    assert!(shape(full, &[&[1, 1, 6, 8], &[1, 1, 5, 8], &[1, 1, 5, 8], &[]]).is_ok());
    let with_lens = ModelOp::Attention { causal: true, with_lens: true };
    let (q, kv): (&[usize], &[usize]) = (&[2, 9, 1, 8], &[2, 3, 33, 8]);
    assert_eq!(shape(with_lens, &[q, kv, kv, &[], &[2]]), Ok(vec![2, 9, 1, 8]));
    for lens in [&[][..], &[1], &[2, 1], &[3]] {
        let err = shape(with_lens, &[q, kv, kv, &[], lens]).unwrap_err();
        assert!(err.to_string().contains("lens [b]: one key count for each batch"), "{lens:?}: {err}");
    }
}

#[test]
fn dtypes_keep_ids_apart_from_arithmetic() {
    use DType::*;
    assert_eq!(ModelOp::Embedding.infer_dtype(&[Some(U32), Some(BF16)]), Ok(Some(BF16)));
    assert!(ModelOp::Embedding.infer_dtype(&[Some(F32), Some(F32)]).is_err());
    assert!(ModelOp::Embedding.infer_dtype(&[Some(U32), Some(U32)]).is_err());
    assert_eq!(ModelOp::Argmax.infer_dtype(&[Some(F16)]), Ok(Some(U32)));
    assert!(ModelOp::Argmax.infer_dtype(&[Some(U32)]).is_err());
    assert!(ModelOp::Rope.infer_dtype(&[Some(F32), Some(BF16), Some(BF16)]).is_err());
    let attention = ModelOp::Attention { causal: true, with_lens: false };
    assert_eq!(attention.infer_dtype(&[Some(BF16), Some(BF16), Some(BF16), None]), Ok(Some(BF16)));
    assert!(attention.infer_dtype(&[Some(BF16), Some(F32), Some(BF16), None]).is_err());
    let with_lens = ModelOp::Attention { causal: false, with_lens: true };
    assert_eq!(with_lens.infer_dtype(&[Some(F16), Some(F16), Some(F16), None, Some(U32)]), Ok(Some(F16)));
    for (lens, says) in
        [(Some(F32), "`lens` must be u32, got f32"), (None, "`lens` must be a u32 tensor, got a scalar")]
    {
        let err = with_lens.infer_dtype(&[Some(F32), Some(F32), Some(F32), None, lens]).unwrap_err();
        assert_eq!(err.to_string(), says);
    }

    // Arithmetic on ids is an error at the node that does it; converting them to floats is not.
    let mut g = Graph::new("f");
    let ids = g.input("ids", InputKind::Tensor);
    let f = g.cast(ids, F32, "ids.to_dtype(F32)");
    let e = g.unary(UnaryOp::Exp, f, "exp(..)");
    let bad = g.binary(BinaryOp::Add, ids, ids, "ids + ids");
    g.outputs = vec![e, bad];
    let err = infer_dtypes(&g, &[Some(U32)]).unwrap_err();
    assert_eq!(err.node, bad);
    assert_eq!(
        err.error.to_string(),
        "u32 values (token ids) take no arithmetic: convert them with `.to_dtype(DType::F32)` first"
    );
    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    g.outputs = vec![g.cast(x, U32, "x.to_dtype(U32)")];
    assert_eq!(infer_dtypes(&g, &[Some(F32)]).unwrap_err().error, InferError::ToInteger { from: F32 });
}

#[test]
fn reference_embedding_argmax_and_rope() {
    let table = Array::new(vec![3, 2], vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let ids = Array::new(vec![2, 2], vec![2.0, 0.0, 1.0, 2.0]);
    let out = eval(&model_graph(ModelOp::Embedding), &[ids, table.clone()]).unwrap();
    assert_eq!(out[0].shape, vec![2, 2, 2]);
    assert_eq!(out[0].data, vec![20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let err = eval(&model_graph(ModelOp::Embedding), &[Array::new(vec![1], vec![3.0]), table]).unwrap_err();
    assert_eq!(err.error.to_string(), "token id 3 is out of range for a vocabulary of 3 (ids are 0..3)");

    let x = Array::new(vec![3, 3], vec![1.0, 5.0, 5.0, -1.0, -2.0, -3.0, 0.0, f64::NAN, 9.0]);
    let out = eval(&model_graph(ModelOp::Argmax), &[x]).unwrap();
    assert_eq!(
        (out[0].shape.clone(), out[0].data.clone()),
        (vec![3, 1], vec![1.0, 0.0, 1.0]),
        "ties: first; NaN: largest"
    );

    // d = 4, seq = 2: position 1 rotates by (cos, sin) per pair (x[i], x[i + 2]).
    let x = Array::new(vec![2, 4], vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
    let cos = Array::new(vec![2, 2], vec![1.0, 1.0, 0.0, 0.5]);
    let sin = Array::new(vec![2, 2], vec![0.0, 0.0, 1.0, 2.0]);
    let out = eval(&model_graph(ModelOp::Rope), &[x, cos, sin]).unwrap();
    assert_eq!(out[0].data, vec![1.0, 2.0, 3.0, 4.0, -3.0, 1.0 - 8.0, 1.0, 2.0 + 4.0]);
}

#[test]
fn reference_sort_orders_as_torch_and_gather_checks_its_indexes() {
    let x = Array::new(vec![2, 4], vec![3.0, f64::NAN, -1.0, 3.0, 0.0, -0.0, 2.0, 1.0]);
    let asc = eval(&model_graph(ModelOp::ArgSort { ascending: true }), &[x.clone()]).unwrap();
    assert_eq!(asc[0].data, vec![2.0, 0.0, 3.0, 1.0, 0.0, 1.0, 3.0, 2.0], "ties by index, NaN last, -0 = 0");
    let desc = eval(&model_graph(ModelOp::ArgSort { ascending: false }), &[x.clone()]).unwrap();
    assert_eq!(desc[0].data, vec![1.0, 0.0, 3.0, 2.0, 2.0, 3.0, 0.0, 1.0], "NaN first, ties by index");
    let mut g = Graph::new("f");
    let (input, k) = (g.input("x", InputKind::Tensor), g.input("k", InputKind::Scalar));
    g.outputs = vec![g.model(ModelOp::ArgTopK, &[input, k], "topk")];
    let top = eval(&g, &[x.clone(), Array::new(vec![], vec![2.0])]).unwrap();
    assert_eq!((top[0].shape.clone(), top[0].data.clone()), (vec![2, 2], vec![1.0, 0.0, 2.0, 3.0]));
    assert!(eval(&g, &[x.clone(), Array::new(vec![], vec![5.0])]).is_err(), "k past the axis");
    let picks = Array::new(vec![2, 3], vec![3.0, 3.0, 2.0, 0.0, 2.0, 1.0]);
    let out = eval(&model_graph(ModelOp::Gather), &[x.clone(), picks]).unwrap();
    assert_eq!((out[0].shape.clone(), out[0].data[..3].to_vec()), (vec![2, 3], vec![3.0, 3.0, -1.0]));
    assert_eq!(out[0].data[3..], [0.0, 2.0, -0.0]);
    let err = eval(&model_graph(ModelOp::Gather), &[x, Array::new(vec![2, 1], vec![0.0, 4.0])]).unwrap_err();
    assert_eq!(err.error.to_string(), "gather index 4 is out of range for an axis of 4 (indexes are 0..4)");
    let shape = |op: ModelOp, args: &[&[usize]]| op.infer_shape(args, &[]);
    assert_eq!(shape(ModelOp::ArgSort { ascending: true }, &[&[2, 0]]), Ok(vec![2, 0]));
    assert!(shape(ModelOp::ArgSort { ascending: true }, &[&[]]).is_err());
    assert_eq!(shape(ModelOp::Gather, &[&[2, 5], &[2, 9]]), Ok(vec![2, 9]));
    assert!(shape(ModelOp::Gather, &[&[2, 5], &[3, 1]]).is_err(), "leading sizes differ");
    assert!(shape(ModelOp::Gather, &[&[2, 5], &[2, 5, 1]]).is_err(), "ranks differ");
    use DType::*;
    assert_eq!(ModelOp::ArgSort { ascending: false }.infer_dtype(&[Some(BF16)]), Ok(Some(U32)));
    assert!(ModelOp::ArgSort { ascending: false }.infer_dtype(&[Some(U32)]).is_err());
    assert_eq!(ModelOp::Gather.infer_dtype(&[Some(U32), Some(U32)]), Ok(Some(U32)));
    assert!(ModelOp::Gather.infer_dtype(&[Some(F16), Some(F32)]).is_err(), "float indexes");
}

#[test]
fn reference_attention_masks_and_shares_kv_heads() {
    // One kv head serving two query heads, two keys, one query each; d = 1.
    let q = Array::new(vec![1, 2, 1, 1], vec![0.0, 1.0]);
    let k = Array::new(vec![1, 1, 2, 1], vec![1.0, 2.0]);
    let v = Array::new(vec![1, 1, 2, 1], vec![10.0, 20.0]);
    let out = eval(
        &model_graph(ModelOp::Attention { causal: false, with_lens: false }),
        &[q.clone(), k.clone(), v.clone(), Array::scalar(1.0)],
    )
    .unwrap();
    // Head 0: scores equal, mean of v. Head 1: scores 1 and 2.
    let (e1, e2) = (1f64.exp(), 2f64.exp());
    let want = [15.0, (10.0 * e1 + 20.0 * e2) / (e1 + e2)];
    assert!(out[0].data.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{:?}", out[0].data);
    // Causal with one query and two keys: the query is the last position, so it sees both keys.
    let causal = eval(
        &model_graph(ModelOp::Attention { causal: true, with_lens: false }),
        &[q, k.clone(), v.clone(), Array::scalar(1.0)],
    )
    .unwrap();
    assert_eq!(causal[0].data, out[0].data);
    // Two queries over two keys, causal: the first sees key 0 only.
    let q2 = Array::new(vec![1, 1, 2, 1], vec![1.0, 1.0]);
    let out =
        eval(&model_graph(ModelOp::Attention { causal: true, with_lens: false }), &[q2, k, v, Array::scalar(1.0)])
            .unwrap();
    assert_eq!(out[0].data[0], 10.0);
}

#[test]
fn reference_attention_with_lens_reads_only_the_counted_keys() {
    // Two queries a batch over a cache of 3 keys; the keys past each count are NaN and must not show.
    let nan = f64::NAN;
    let q = Array::new(vec![2, 1, 2, 1], vec![1.0; 4]);
    let k = Array::new(vec![2, 1, 3, 1], vec![1.0, 2.0, nan, 1.0, 2.0, nan]);
    let v = Array::new(vec![2, 1, 3, 1], vec![10.0, 20.0, nan, 10.0, 20.0, nan]);
    let run = |causal, counts: [f64; 2]| {
        let args = [q.clone(), k.clone(), v.clone(), Array::scalar(1.0), Array::new(vec![2], counts.to_vec())];
        eval(&model_graph(ModelOp::Attention { causal, with_lens: true }), &args).map(|out| out[0].data.clone())
    };
    let (e1, e2) = (1f64.exp(), 2f64.exp());
    let both = (10.0 * e1 + 20.0 * e2) / (e1 + e2);
    let close =
        |got: Vec<f64>, want: [f64; 4]| assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{got:?}");
    close(run(false, [1.0, 2.0]).unwrap(), [10.0, 10.0, both, both]);
    // Causal: the queries are the last two of lens[b] keys, so the first sees key 0 only.
    close(run(true, [2.0, 2.0]).unwrap(), [10.0, both, 10.0, both]);
    // No key at all: zeros.
    close(run(false, [0.0, 1.0]).unwrap(), [0.0, 0.0, 10.0, 10.0]);
    let err = run(false, [0.0, 4.0]).unwrap_err();
    assert_eq!(err.error, InferError::KeyCount { batch: 1, len: 4, least: 0, keys: 3 });
    assert_eq!(err.error.to_string(), "key count lens[1] = 4 is outside 0..=3 (at most the 3 keys k and v hold)");
    let err = run(true, [1.0, 2.0]).unwrap_err();
    let says =
        "key count lens[0] = 1 is outside 2..=3 (under causal at least the 2 queries, at most the 3 keys k and v hold)";
    assert_eq!(err.error.to_string(), says);
}

#[test]
fn model_ops_are_groups_of_their_own() {
    // exp(rope(x)) + 1 and argmax(exp(x)): pointwise work stays out of the model groups.
    let mut g = Graph::new("f");
    let x = g.input("x", InputKind::Tensor);
    let cos = g.input("cos", InputKind::Tensor);
    let sin = g.input("sin", InputKind::Tensor);
    let e = g.unary(UnaryOp::Exp, x, "exp(x)");
    let r = g.model(ModelOp::Rope, &[e, cos, sin], "rope(..)");
    let one = g.constant(1.0);
    let y = g.binary(BinaryOp::Add, r, one, "r + 1");
    let m = g.model(ModelOp::Argmax, &[y], "y.argmax(-1)");
    g.outputs = vec![y, m];
    let plan = Plan::fused(&g);
    plan.verify(&g).unwrap();
    let kinds: Vec<GroupKind> = plan.groups.iter().map(|grp| grp.kind).collect();
    assert_eq!(kinds, [GroupKind::Pointwise, GroupKind::Model, GroupKind::Pointwise, GroupKind::Model]);
    assert_eq!(Plan::parse(&plan.to_text(), &g).unwrap(), plan);
    // A plan that puts a model op into a pointwise group does not verify.
    let bad = plan.to_text().replace(&format!("model nodes %{}", r.0), &format!("pointwise nodes %{}", r.0));
    assert!(Plan::parse(&bad, &g).unwrap_err().contains("runs alone"), "{bad}");
    let shapes = infer_shapes(&g, &[vec![2, 3, 4], vec![3, 2], vec![3, 2]]).unwrap();
    assert_eq!(shapes[m.index()], vec![2, 3, 1]);
}

#[test]
fn rope_tables_are_one_block_or_one_a_batch() {
    let rope = |x: &[usize], table: &[usize]| ModelOp::Rope.infer_shape(&[x, table, table], &[]);
    // [seq, d/2] for every batch, or [b, seq, d/2] for each.
    assert_eq!(rope(&[2, 3, 5, 8], &[5, 4]).unwrap(), [2, 3, 5, 8]);
    assert_eq!(rope(&[2, 3, 5, 8], &[2, 5, 4]).unwrap(), [2, 3, 5, 8]);
    assert!(rope(&[2, 3, 5, 8], &[3, 5, 4]).is_err(), "a table for another number of batches");
    assert!(rope(&[5, 8], &[1, 5, 4]).is_err(), "a batched table needs a batch axis");
    // Rows of x [2, 3, 5, d] read rows 0..5 of batch 0's block, then batch 1's.
    let one = RopeTable::of(&[2, 3, 5, 8], &[5, 4]);
    let each = RopeTable::of(&[2, 3, 5, 8], &[2, 5, 4]);
    assert_eq!([one.row(7, 5), one.row(16, 5), one.row(29, 5)], [2, 1, 4]);
    assert_eq!([each.row(7, 5), each.row(16, 5), each.row(29, 5)], [2, 6, 9]);
    // The reference: a batch's rows turned by its own table.
    let mut g = Graph::new("rope");
    let [x, cos, sin] = ["x", "cos", "sin"].map(|n| g.input(n, InputKind::Tensor));
    g.outputs = vec![g.model(ModelOp::Rope, &[x, cos, sin], "rope(x, cos, sin)")];
    let x = Array::new(vec![2, 1, 1, 2], vec![1.0, 0.0, 1.0, 0.0]);
    let (cos, sin) = (Array::new(vec![2, 1, 1], vec![1.0, 0.0]), Array::new(vec![2, 1, 1], vec![0.0, 1.0]));
    let out = eval(&g, &[x, cos, sin]).unwrap();
    assert_eq!(out[0].data, [1.0, 0.0, 0.0, 1.0], "batch 0 unturned, batch 1 by a quarter turn");
}
