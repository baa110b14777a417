use fuse::prelude::*;

struct Layer {
    table: Tensor,
    scale: f32,
}

impl Layer {
    #[fuse]
    fn forward(&self, ids: &Tensor, cos: &Tensor, sin: &Tensor, k: &Tensor, v: &Tensor, lens: &Tensor) -> Result<(Tensor, Tensor)> {
        let x = embedding(ids, &self.table);
        let q = rope(&x, cos, sin);
        let causal = attention(&q, k, v, self.scale, true);
        let full = attention(&q, k, v, 0.125, false);
        let counted = attention_len(&q, k, v, lens, self.scale, true);
        Ok(((causal + full + counted).argmax(-1), x))
    }
}

fn main() {
    let cpu = Device::Cpu;
    let table = Tensor::from_vec((0..40).map(|i| i as f32 * 0.1).collect::<Vec<f32>>(), &[5, 8], &cpu).unwrap();
    let layer = Layer { table, scale: 0.5 };
    let ids = Tensor::from_vec(vec![4u32, 0, 2], &[1, 1, 3], &cpu).unwrap();
    let half = Tensor::from_vec(vec![0.5f32; 12], &[3, 4], &cpu).unwrap();
    let kv = Tensor::from_vec(vec![0.25f32; 32], &[1, 1, 4, 8], &cpu).unwrap();
    let lens = Tensor::from_vec(vec![3u32], &[1], &cpu).unwrap();
    let (ids_out, x) = layer.forward(&ids, &half, &half, &kv, &kv, &lens).unwrap();
    assert_eq!(ids_out.shape(), &[1, 1, 3, 1]);
    assert_eq!(ids_out.dtype(), DType::U32);
    assert_eq!(x.shape(), &[1, 1, 3, 8]);
}
