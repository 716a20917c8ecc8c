//! Decoding a parsed document (a [`serde_json::Value`]) into typed structs while
//! remembering where in the document an error happened.
//!
//! Upstream decodes strictly (`k8s.io/apimachinery/pkg/runtime/serializer/json` with
//! `Strict: true`) and its errors name the offending field. serde's own errors carry no
//! path, so this module walks the value with a small [`serde::Deserializer`] that prefixes
//! every error with the map keys and list indices it passed through.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::Value;

/// One step of a field path: a map key or a list index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A decoding error and the path (from the document root) of the value that caused it.
#[derive(Debug)]
pub(crate) struct DecodeError {
    pub(crate) path: Vec<Segment>,
    pub(crate) message: String,
}

impl DecodeError {
    fn within(mut self, segment: Segment) -> Self {
        self.path.insert(0, segment);
        self
    }

    /// The path in the usual JSONPath-like spelling: `authentication.webhook.cacheTTL`,
    /// `registerWithTaints[1].effect`. Empty for the document root.
    pub(crate) fn path_string(&self) -> String {
        format_path(&self.path)
    }
}

/// Renders a path as `a.b[2].c`.
pub(crate) fn format_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "field {}: {}", self.path_string(), self.message)
        }
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError { path: Vec::new(), message: msg.to_string() }
    }

    // The key being decoded is added to the path by `Map::next_key_seed`, so the message
    // need not repeat it nor list the (long) set of expected fields.
    fn unknown_field(_field: &str, _expected: &'static [&'static str]) -> Self {
        Self::custom("unknown field")
    }

    fn missing_field(field: &'static str) -> Self {
        Self::custom(format_args!("missing required field {field:?}"))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::custom(format_args!("duplicate field {field:?}"))
    }
}

/// Decodes `value` into `T`, reporting the path of the first offending value on error.
pub(crate) fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    T::deserialize(ValueDeserializer(value))
}

/// A [`serde::Deserializer`] over a borrowed [`Value`] that records the path of errors.
struct ValueDeserializer<'a>(&'a Value);

impl<'de> de::Deserializer<'de> for ValueDeserializer<'_> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => visitor.visit_seq(Seq { items: items.iter(), index: 0 }),
            Value::Object(map) => visitor.visit_map(Map { entries: map.iter(), current: None }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct Seq<'a> {
    items: std::slice::Iter<'a, Value>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for Seq<'_> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DecodeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(ValueDeserializer(item)).map(Some).map_err(|e| e.within(Segment::Index(index)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map<'a> {
    entries: serde_json::map::Iter<'a>,
    current: Option<(&'a String, &'a Value)>,
}

impl<'de> de::MapAccess<'de> for Map<'_> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DecodeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((key, value));
        let key_de: de::value::StrDeserializer<'_, DecodeError> = key.as_str().into_deserializer();
        seed.deserialize(key_de).map(Some).map_err(|e| e.within(Segment::Key(key.clone())))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DecodeError> {
        let (key, value) = self
            .current
            .take()
            .ok_or_else(|| <DecodeError as de::Error>::custom("map value requested before its key"))?;
        seed.deserialize(ValueDeserializer(value)).map_err(|e| e.within(Segment::Key(key.clone())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}
