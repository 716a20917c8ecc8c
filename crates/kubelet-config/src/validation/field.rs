//! Field errors as upstream prints them (`staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`,
//! `path.go`): `spec.containers[0].image: Required value`, `metadata.name: Invalid value: "Web": <detail>`,
//! `…: Unsupported value: "x": supported values: "a", "b"`, `Duplicate value`, `Not found`, `Forbidden`,
//! `Too long`. An [`ErrorList`] prints as Go's `%v` of a slice: `[first second …]`.

use std::fmt;

/// A path to a field: `spec`, `.containers`, `[0]`, `[memory]` (`field.Path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A root path (`field.NewPath`).
    pub fn new(root: &str) -> Self {
        Self(root.to_string())
    }

    /// `p.name`.
    pub fn child(&self, name: &str) -> Self {
        Self(format!("{}.{name}", self.0))
    }

    /// `p[i]`.
    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    /// `p[key]` (map keys are not quoted, as upstream).
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kinds of field error (`field.ErrorType`), printed as upstream's `ErrorType.String`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `Not found`.
    NotFound,
    /// `Required value`.
    Required,
    /// `Duplicate value`.
    Duplicate,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
    /// `Forbidden`.
    Forbidden,
    /// `Too long`.
    TooLong,
}

impl ErrorType {
    fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
        }
    }
}

/// The offending value, printed as upstream prints `BadValue`: strings quoted as Go's `%q`, numbers and booleans
/// bare, anything else as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// No value is printed (required, forbidden, too long).
    None,
    /// A string.
    Str(String),
    /// A number.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// Any other value, already as JSON.
    Json(String),
}

impl BadValue {
    /// A value printed as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(v: &T) -> Self {
        Self::Json(serde_json::to_string(v).unwrap_or_default())
    }
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        Self::Str(s.to_string())
    }
}

impl From<&String> for BadValue {
    fn from(s: &String) -> Self {
        Self::Str(s.clone())
    }
}

impl From<String> for BadValue {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}

impl From<i64> for BadValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<i32> for BadValue {
    fn from(v: i32) -> Self {
        Self::Int(v.into())
    }
}

impl From<bool> for BadValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

/// One field error (`field.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The kind.
    pub kind: ErrorType,
    /// The field's path.
    pub field: String,
    /// The offending value.
    pub value: BadValue,
    /// Why.
    pub detail: String,
}

/// Go's `strconv.Quote`: `"` and `\` escaped, control characters as `\n`, `\x01`, `\u0085`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.kind.as_str())?;
        let shows_value = !matches!(self.kind, ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong);
        if shows_value {
            match &self.value {
                BadValue::None => {}
                BadValue::Str(s) => write!(f, ": {}", go_quote(s))?,
                BadValue::Int(v) => write!(f, ": {v}")?,
                BadValue::Bool(v) => write!(f, ": {v}")?,
                BadValue::Json(j) => write!(f, ": {j}")?,
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// `field.Invalid`.
pub fn invalid(path: &Path, value: impl Into<BadValue>, detail: impl Into<String>) -> FieldError {
    FieldError { kind: ErrorType::Invalid, field: path.to_string(), value: value.into(), detail: detail.into() }
}

/// `field.Required`.
pub fn required(path: &Path, detail: impl Into<String>) -> FieldError {
    FieldError { kind: ErrorType::Required, field: path.to_string(), value: BadValue::None, detail: detail.into() }
}

/// `field.Forbidden`.
pub fn forbidden(path: &Path, detail: impl Into<String>) -> FieldError {
    FieldError { kind: ErrorType::Forbidden, field: path.to_string(), value: BadValue::None, detail: detail.into() }
}

/// `field.Duplicate`.
pub fn duplicate(path: &Path, value: impl Into<BadValue>) -> FieldError {
    FieldError { kind: ErrorType::Duplicate, field: path.to_string(), value: value.into(), detail: String::new() }
}

/// `field.NotFound`.
pub fn not_found(path: &Path, value: impl Into<BadValue>) -> FieldError {
    FieldError { kind: ErrorType::NotFound, field: path.to_string(), value: value.into(), detail: String::new() }
}

/// `field.NotSupported`: the detail lists the supported values, each quoted.
pub fn not_supported(path: &Path, value: impl Into<BadValue>, supported: &[&str]) -> FieldError {
    let detail = if supported.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", supported.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(", "))
    };
    FieldError { kind: ErrorType::NotSupported, field: path.to_string(), value: value.into(), detail }
}

/// `field.TooLong` with a maximum length in bytes.
pub fn too_long(path: &Path, max: usize) -> FieldError {
    let unit = if max == 1 { "byte" } else { "bytes" };
    FieldError {
        kind: ErrorType::TooLong,
        field: path.to_string(),
        value: BadValue::None,
        detail: format!("may not be more than {max} {unit}"),
    }
}

/// All the errors of a validation, in upstream's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorList(pub Vec<FieldError>);

impl ErrorList {
    /// Adds one error.
    pub fn push(&mut self, e: FieldError) {
        self.0.push(e);
    }

    /// Adds many.
    pub fn extend(&mut self, errs: impl IntoIterator<Item = FieldError>) {
        self.0.extend(errs);
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The errors.
    pub fn iter(&self) -> impl Iterator<Item = &FieldError> {
        self.0.iter()
    }
}

impl IntoIterator for ErrorList {
    type Item = FieldError;
    type IntoIter = std::vec::IntoIter<FieldError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// As Go's `%v` of a `field.ErrorList`: `[a b c]`.
impl fmt::Display for ErrorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{e}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_as_upstream() {
        let p = Path::new("spec").child("containers").index(0).child("resources").child("limits").key("memory");
        assert_eq!(
            invalid(&p, "lots", "bad").to_string(),
            "spec.containers[0].resources.limits[memory]: Invalid value: \"lots\": bad"
        );
        assert_eq!(required(&Path::new("spec").child("containers"), "").to_string(), "spec.containers: Required value");
        assert_eq!(
            not_supported(&Path::new("spec").child("restartPolicy"), "Sometimes", &["Always", "OnFailure", "Never"])
                .to_string(),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        assert_eq!(duplicate(&Path::new("a"), "x").to_string(), "a: Duplicate value: \"x\"");
        assert_eq!(
            too_long(&Path::new("metadata").child("annotations"), 262144).to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
        assert_eq!(invalid(&Path::new("n"), 70000, "d").to_string(), "n: Invalid value: 70000: d");
        assert_eq!(go_quote("a\"b\\\n\u{1}é"), "\"a\\\"b\\\\\\n\\x01é\"");
        let list = ErrorList(vec![required(&Path::new("a"), ""), forbidden(&Path::new("b"), "no")]);
        assert_eq!(list.to_string(), "[a: Required value b: Forbidden: no]");
    }
}
