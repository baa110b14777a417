//! Typed metadata getters. Integers convert between widths when the value fits (writers differ in the width
//! they pick, e.g. for token ids); anything else is `Error::WrongType` naming the key and both types.

use super::{GgufFile, MetaValue};
use crate::error::{Error, Result};

impl GgufFile {
    /// The value of `key`, or `Error::MissingKey`.
    pub fn require(&self, key: &str) -> Result<&MetaValue> {
        self.get(key).ok_or_else(|| Error::MissingKey { path: self.path.clone(), key: key.to_string() })
    }

    fn wrong_type(&self, key: &str, found: &MetaValue, expected: &'static str) -> Error {
        Error::WrongType { path: self.path.clone(), key: key.to_string(), found: found.type_name(), expected }
    }

    fn integer<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T> {
        let value = self.require(key)?;
        value.as_i128().and_then(|v| T::try_from(v).ok()).ok_or_else(|| self.wrong_type(key, value, expected))
    }

    pub fn u32(&self, key: &str) -> Result<u32> {
        self.integer(key, "an integer that fits u32")
    }
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.integer(key, "an integer that fits u64")
    }
    pub fn i64(&self, key: &str) -> Result<i64> {
        self.integer(key, "an integer that fits i64")
    }

    /// An f32 (an f64 value is narrowed).
    pub fn f32(&self, key: &str) -> Result<f32> {
        match self.require(key)? {
            MetaValue::F32(v) => Ok(*v),
            MetaValue::F64(v) => Ok(*v as f32),
            other => Err(self.wrong_type(key, other, "f32")),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            MetaValue::Bool(v) => Ok(*v),
            other => Err(self.wrong_type(key, other, "bool")),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            MetaValue::Str(v) => Ok(v),
            other => Err(self.wrong_type(key, other, "string")),
        }
    }

    fn array(&self, key: &str, expected: &'static str) -> Result<&[MetaValue]> {
        match self.require(key)? {
            MetaValue::Array(items) => Ok(items),
            other => Err(self.wrong_type(key, other, expected)),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        let value = self.require(key)?;
        let items = self.array(key, "array of strings")?;
        items
            .iter()
            .map(|item| match item {
                MetaValue::Str(s) => Ok(s.as_str()),
                _ => Err(self.wrong_type(key, value, "array of strings")),
            })
            .collect()
    }

    /// An array of integers that each fit i32 (e.g. `tokenizer.ggml.token_type`).
    pub fn i32s(&self, key: &str) -> Result<Vec<i32>> {
        let value = self.require(key)?;
        let items = self.array(key, "array of integers")?;
        items
            .iter()
            .map(|item| {
                item.as_i128()
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| self.wrong_type(key, value, "array of integers that fit i32"))
            })
            .collect()
    }
}
