//! GGUF images built byte by byte, parsed back; and broken images, which must give errors, never panics.

pub(crate) use super::image::Image;
use super::*;

fn string_value(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// A file with one value of every type, a nested array, alignment 64 and two F32 tensors.
fn sample_file() -> Vec<u8> {
    let mut strings = 8u32.to_le_bytes().to_vec(); // element type: string
    strings.extend_from_slice(&2u64.to_le_bytes());
    strings.extend(string_value("a"));
    strings.extend(string_value("bé"));
    let mut nested = 9u32.to_le_bytes().to_vec(); // element type: array
    nested.extend_from_slice(&1u64.to_le_bytes());
    nested.extend_from_slice(&5u32.to_le_bytes()); // inner: i32
    nested.extend_from_slice(&2u64.to_le_bytes());
    nested.extend_from_slice(&(-3i32).to_le_bytes());
    nested.extend_from_slice(&4i32.to_le_bytes());

    let mut image = Image::header(3, 2, 15);
    image
        .kv("u8", 0, &[200])
        .kv("i8", 1, &[0xff])
        .kv("u16", 2, &500u16.to_le_bytes())
        .kv("i16", 3, &(-500i16).to_le_bytes())
        .kv("u32", 4, &70000u32.to_le_bytes())
        .kv("i32", 5, &(-7i32).to_le_bytes())
        .kv("f32", 6, &1.5f32.to_le_bytes())
        .kv("bool", 7, &[1])
        .kv("str", 8, &string_value("llama"))
        .kv("strings", 9, &strings)
        .kv("u64", 10, &(1u64 << 40).to_le_bytes())
        .kv("i64", 11, &(-1i64 << 40).to_le_bytes())
        .kv("f64", 12, &0.25f64.to_le_bytes())
        .kv("nested", 9, &nested)
        .kv("general.alignment", 4, &64u32.to_le_bytes())
        .tensor("a", &[3], 0, 0)
        .tensor("b", &[2, 2], 0, 64)
        .pad_to(64);
    for v in [1.0f32, 2.0, 3.0] {
        image.raw(&v.to_le_bytes());
    }
    image.pad_to(64);
    for v in [4.0f32, 5.0, 6.0, 7.0] {
        image.raw(&v.to_le_bytes());
    }
    image.finish()
}

#[test]
fn parses_every_value_type_and_tensor() {
    let file = GgufFile::from_bytes(sample_file(), "sample.gguf").unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.data_offset() % 64, 0);
    assert_eq!(file.get("u8"), Some(&MetaValue::U8(200)));
    assert_eq!(file.get("i8"), Some(&MetaValue::I8(-1)));
    assert_eq!(file.get("i16"), Some(&MetaValue::I16(-500)));
    assert_eq!(file.u32("u16").unwrap(), 500);
    assert_eq!(file.u32("u32").unwrap(), 70000);
    assert_eq!(file.i64("i32").unwrap(), -7);
    assert_eq!(file.u64("u64").unwrap(), 1 << 40);
    assert_eq!(file.i64("i64").unwrap(), -1 << 40);
    assert_eq!(file.f32("f32").unwrap(), 1.5);
    assert_eq!(file.f32("f64").unwrap(), 0.25);
    assert!(file.bool("bool").unwrap());
    assert_eq!(file.str("str").unwrap(), "llama");
    assert_eq!(file.strings("strings").unwrap(), vec!["a", "bé"]);
    let nested = MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::I32(-3), MetaValue::I32(4)])]);
    assert_eq!(file.get("nested"), Some(&nested));
    assert_eq!(file.metadata().count(), 15);

    let b = file.tensor_info("b").unwrap();
    assert_eq!((b.dims.clone(), b.shape(), b.n_elements), (vec![2, 2], vec![2, 2], 4));
    assert_eq!(file.tensor_f32("a").unwrap(), vec![1.0, 2.0, 3.0]);
    assert_eq!(file.tensor_f32("b").unwrap(), vec![4.0, 5.0, 6.0, 7.0]);
    assert_eq!(file.tensor_bytes("b").unwrap().len(), 16);
}

#[test]
fn typed_getters_report_key_and_types() {
    let file = GgufFile::from_bytes(sample_file(), "sample.gguf").unwrap();
    let message = file.u32("str").unwrap_err().to_string();
    assert!(message.contains("`str` is string, expected an integer"), "{message}");
    assert!(file.u32("i32").is_err(), "-7 does not fit u32");
    assert!(file.u32("u64").is_err(), "2^40 does not fit u32");
    assert!(matches!(file.str("absent"), Err(Error::MissingKey { .. })));
    assert!(file.strings("nested").is_err());
    assert!(matches!(file.tensor_info("c"), Err(Error::MissingTensor { .. })));
}

fn error_of(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes, "bad.gguf") {
        Ok(_) => panic!("a broken file parsed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample_file();
    for len in 0..bytes.len() {
        let message = error_of(bytes[..len].to_vec());
        assert!(message.starts_with("bad.gguf: at byte "), "length {len}: {message}");
    }
}

#[test]
fn bad_magic_and_versions() {
    assert!(error_of(b"GGML\x03\0\0\0".to_vec()).contains("bad magic"));
    let mut v1 = Image::header(1, 0, 0);
    assert!(error_of(v1.finish()).contains("version 1 is not supported"));
    v1 = Image::header(7, 0, 0);
    assert!(error_of(v1.finish()).contains("unknown GGUF version 7"));
    v1 = Image::header(3u32.swap_bytes(), 0, 0);
    assert!(error_of(v1.finish()).contains("big-endian"));
    // Version 2 has the same layout as 3.
    assert_eq!(GgufFile::from_bytes(Image::header(2, 0, 0).finish(), "v2").unwrap().version(), 2);
}

#[test]
fn tensor_past_the_end_is_an_error() {
    let mut image = Image::header(3, 1, 0);
    image.tensor("w", &[64], 0, 0).pad_to(32).raw(&[0; 100]); // needs 256 bytes
    let message = error_of(image.finish());
    assert!(message.contains("tensor `w` (256 bytes at data offset 0) runs past the end"), "{message}");
}

#[test]
fn tensors_sharing_bytes_are_an_error() {
    // Two f32 tensors of 16 values (64 bytes each) at 0 and 64 are fine; the second moved to 32 (still
    // aligned) starts inside the first; the first's type changed to F64 (id 28: 128 bytes) runs into the second.
    let file = |a_type: u32, b_offset: u64| {
        let mut image = Image::header(3, 2, 0);
        image.tensor("a", &[16], a_type, 0).tensor("b", &[16], 0, b_offset).pad_to(32).raw(&[0; 160]);
        image.finish()
    };
    assert!(GgufFile::from_bytes(file(0, 64), "good.gguf").is_ok());
    let message = error_of(file(0, 32));
    assert!(
        message.contains("tensor `b` (data offset 32) starts inside tensor `a` (data offsets 0 to 64"),
        "{message}"
    );
    let message = error_of(file(28, 64));
    assert!(
        message.contains("tensor `b` (data offset 64) starts inside tensor `a` (data offsets 0 to 128, F64"),
        "{message}"
    );
}

#[test]
fn a_directory_is_an_error_that_says_so() {
    let dir = std::env::temp_dir();
    for err in [GgufFile::open(&dir).err(), GgufFile::read(&dir).err()] {
        let message = err.expect("a directory is refused").to_string();
        assert!(message.ends_with(": a directory, not a GGUF file"), "{message}");
    }
}

#[test]
fn misaligned_offset_and_partial_block_are_errors() {
    let mut image = Image::header(3, 1, 0);
    image.tensor("w", &[4], 0, 4).pad_to(32).raw(&[0; 64]);
    assert!(error_of(image.finish()).contains("not a multiple of the alignment"));
    let mut image = Image::header(3, 1, 0);
    image.tensor("q", &[33], 3, 0).pad_to(32).raw(&[0; 64]);
    assert!(error_of(image.finish()).contains("not a multiple of Q4_1's block of 32"));
}

#[test]
fn hostile_counts_are_errors_not_allocations() {
    let mut image = Image::header(3, 0, 1);
    image.string("k").u32(9).u32(0).u64(u64::MAX >> 8);
    assert!(error_of(image.finish()).contains("cannot fit"));
    let image = Image::header(3, u64::MAX >> 8, 0);
    assert!(error_of(image.finish()).contains("tensor count"));
    let mut image = Image::header(3, 0, 1);
    image.string("k").u32(13).u32(0);
    assert!(error_of(image.finish()).contains("unknown metadata value type 13"));
    let mut image = Image::header(3, 0, 1);
    image.string("k").u32(7).raw(&[2]);
    assert!(error_of(image.finish()).contains("bool value 2"));
}

#[test]
fn unknown_tensor_type_opens_but_its_bytes_are_refused() {
    let mut image = Image::header(3, 1, 0);
    image.tensor("iq", &[256], 16, 0).pad_to(32).raw(&[0; 66]);
    let file = GgufFile::from_bytes(image.finish(), "iq.gguf").unwrap();
    let message = file.tensor_bytes("iq").unwrap_err().to_string();
    assert!(message.contains("ggml type id 16"), "{message}");
}

#[test]
fn read_and_open_see_the_same_file_and_name_it_in_errors() {
    let dir = std::env::temp_dir().join(format!("fuse-gguf-read-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    std::fs::write(&path, sample_file()).unwrap();
    let (mapped, read) = (GgufFile::open(&path).unwrap(), GgufFile::read(&path).unwrap());
    let cpu = GgufFile::open_for(&path, &fuse::Device::Cpu).unwrap();
    for file in [&read, &cpu] {
        assert_eq!(file.tensors(), mapped.tensors());
        assert_eq!(file.metadata().count(), mapped.metadata().count());
        assert_eq!(file.tensor_bytes("b").unwrap(), mapped.tensor_bytes("b").unwrap());
        assert_eq!(file.tensor_f32("a").unwrap(), vec![1.0, 2.0, 3.0]);
    }
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, []).unwrap();
    let message = GgufFile::read(&empty).err().unwrap().to_string();
    assert!(message.contains("empty.gguf"), "{message}");
    let missing = dir.join("missing.gguf");
    let message = GgufFile::read(&missing).err().unwrap().to_string();
    assert!(message.contains("missing.gguf"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn available_memory_is_read_where_linux_reports_it() {
    if cfg!(target_os = "linux") {
        let bytes = super::available_memory().expect("MemAvailable in /proc/meminfo");
        assert!(bytes > 1 << 20, "{bytes} bytes available");
    }
}

#[test]
fn a_read_in_stretches_from_several_threads_gives_the_files_bytes() {
    let path = std::env::temp_dir().join(format!("fuse-gguf-stretches-{}", std::process::id()));
    let bytes: Vec<u8> = (0..1_000_003u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    for least in [4096, 100_000, 1 << 30] {
        let mut memory = vec![0u8; bytes.len()];
        super::read_into(&mut std::fs::File::open(&path).unwrap(), &mut memory, least).unwrap();
        assert!(memory == bytes, "stretches of at least {least} bytes");
    }
    // A file shorter than the memory is an error, not a partly filled copy.
    let mut memory = vec![0u8; bytes.len() + 1];
    assert!(super::read_into(&mut std::fs::File::open(&path).unwrap(), &mut memory, 4096).is_err());
    std::fs::remove_file(&path).unwrap();
}
