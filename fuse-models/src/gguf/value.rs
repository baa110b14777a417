//! Metadata values: every GGUF value type, arrays included (arrays of arrays too, to a bounded depth).

use super::cursor::Cursor;
use crate::error::Result;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// Deeper nesting is refused rather than followed, so a hostile file cannot exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 8;

impl MetaValue {
    /// The GGUF name of this value's type, for error messages.
    pub fn type_name(&self) -> String {
        match self {
            MetaValue::U8(_) => "u8".into(),
            MetaValue::I8(_) => "i8".into(),
            MetaValue::U16(_) => "u16".into(),
            MetaValue::I16(_) => "i16".into(),
            MetaValue::U32(_) => "u32".into(),
            MetaValue::I32(_) => "i32".into(),
            MetaValue::F32(_) => "f32".into(),
            MetaValue::Bool(_) => "bool".into(),
            MetaValue::Str(_) => "string".into(),
            MetaValue::U64(_) => "u64".into(),
            MetaValue::I64(_) => "i64".into(),
            MetaValue::F64(_) => "f64".into(),
            MetaValue::Array(items) => match items.first() {
                Some(first) => format!("array of {} {}", items.len(), first.type_name()),
                None => "empty array".into(),
            },
        }
    }

    /// Any integer value, widened, for the lenient integer getters.
    pub(crate) fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    pub(crate) fn read(cursor: &mut Cursor<'_>, key: &str) -> Result<MetaValue> {
        let at = cursor.position();
        let type_id = cursor.u32("metadata value type")?;
        Self::read_typed(cursor, type_id, 0).map_err(|e| annotate(e, key, at))
    }

    fn read_typed(cursor: &mut Cursor<'_>, type_id: u32, depth: usize) -> Result<MetaValue> {
        Ok(match type_id {
            0 => MetaValue::U8(cursor.u8("u8 value")?),
            1 => MetaValue::I8(cursor.u8("i8 value")? as i8),
            2 => MetaValue::U16(cursor.u16("u16 value")?),
            3 => MetaValue::I16(cursor.u16("i16 value")? as i16),
            4 => MetaValue::U32(cursor.u32("u32 value")?),
            5 => MetaValue::I32(cursor.u32("i32 value")? as i32),
            6 => MetaValue::F32(f32::from_bits(cursor.u32("f32 value")?)),
            7 => {
                let at = cursor.position();
                match cursor.u8("bool value")? {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => return Err(cursor.error_at(at, format!("bool value {b} is neither 0 nor 1"))),
                }
            }
            8 => MetaValue::Str(cursor.string("string value")?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(cursor.error(format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
                }
                let element_type = cursor.u32("array element type")?;
                let count = cursor.len("array length")?;
                // Every element takes at least one byte: a count beyond the bytes left is a corrupt file, and
                // checking it first keeps a bogus count from reserving gigabytes.
                if count > cursor.remaining() {
                    return Err(cursor.error(format!(
                        "array of {count} elements cannot fit in the {} bytes left",
                        cursor.remaining()
                    )));
                }
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(Self::read_typed(cursor, element_type, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(cursor.u64("u64 value")?),
            11 => MetaValue::I64(cursor.u64("i64 value")? as i64),
            12 => MetaValue::F64(f64::from_bits(cursor.u64("f64 value")?)),
            unknown => return Err(cursor.error(format!("unknown metadata value type {unknown}"))),
        })
    }
}

/// Adds the key being read to a malformed-file message, so the report names the entry that is broken.
fn annotate(error: crate::Error, key: &str, value_start: usize) -> crate::Error {
    match error {
        crate::Error::Malformed { path, offset, what } => crate::Error::Malformed {
            path,
            offset,
            what: format!("{what} (in the value of `{key}`, which starts at byte {value_start})"),
        },
        other => other,
    }
}
