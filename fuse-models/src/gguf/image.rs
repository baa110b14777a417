//! A GGUF writer, byte by byte: header, key/value pairs, tensor infos, aligned data.

/// Writes GGUF images (version 3, little-endian): the random models of [`crate::llama::Llama::random_stored`]
/// and the tests' images.
#[derive(Default)]
pub(crate) struct Image {
    bytes: Vec<u8>,
}

impl Image {
    pub(crate) fn header(version: u32, tensors: u64, kvs: u64) -> Image {
        let mut image = Image::default();
        image.bytes.extend_from_slice(b"GGUF");
        image.u32(version).u64(tensors).u64(kvs);
        image
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }
    pub(crate) fn string(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }
    /// A key and a value of GGUF type `type_id` whose encoding is `value`.
    pub(crate) fn kv(&mut self, key: &str, type_id: u32, value: &[u8]) -> &mut Self {
        self.string(key).u32(type_id).raw(value)
    }
    pub(crate) fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.string(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    pub(crate) fn pad_to(&mut self, alignment: usize) -> &mut Self {
        while !self.bytes.len().is_multiple_of(alignment) {
            self.bytes.push(0);
        }
        self
    }
    pub(crate) fn finish(&self) -> Vec<u8> {
        self.bytes.clone()
    }
}
