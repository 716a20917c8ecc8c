//! Just enough of `resource.Quantity` (`k8s.io/apimachinery/pkg/api/resource/quantity.go`)
//! to check a quantity's syntax and whether it is zero, which is all the configuration's
//! decoding and validation need.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// Upstream's `ErrFormatWrong` text.
pub(crate) const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Checks the syntax of a quantity (`"100Mi"`, `"1.5"`, `"2e3"`, `"-1k"`) and reports
/// whether its value is zero.
pub(crate) fn quantity_is_zero(s: &str) -> Result<bool, String> {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_len = unsigned.bytes().take_while(|c| c.is_ascii_digit() || *c == b'.').count();
    let (number, suffix) = unsigned.split_at(number_len);
    let digits = number.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || number.bytes().filter(|c| *c == b'.').count() > 1 {
        return Err(QUANTITY_FORMAT_ERROR.to_string());
    }
    let suffix_ok = matches!(
        suffix,
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| {
            let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            !exp.is_empty() && exp.bytes().all(|c| c.is_ascii_digit())
        })
        .unwrap_or(false);
    if !suffix_ok {
        return Err(format!("unable to parse quantity's suffix in {s:?}"));
    }
    Ok(number.bytes().all(|c| c == b'0' || c == b'.'))
}

/// Accepts a quantity written as a string or a plain number, like upstream's
/// `Quantity.UnmarshalJSON`, and checks its syntax.
struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity such as \"100Mi\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        let v = v.trim();
        quantity_is_zero(v).map_err(E::custom)?;
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
}

/// Deserializes a `QuantityValue`-like string field (empty when absent).
pub(crate) fn deserialize_quantity_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    deserializer.deserialize_any(QuantityVisitor)
}

/// A quantity as one value of a `ResourceList`.
struct CheckedQuantity(Quantity);

impl<'de> Deserialize<'de> for CheckedQuantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor).map(|s| CheckedQuantity(Quantity(s)))
    }
}

/// Deserializes a `v1.ResourceList` (`map[ResourceName]Quantity`), checking every quantity.
pub(crate) fn deserialize_resource_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, Quantity>, D::Error> {
    let raw = BTreeMap::<String, CheckedQuantity>::deserialize(deserializer)?;
    Ok(raw.into_iter().map(|(k, v)| (k, v.0)).collect())
}

#[cfg(test)]
mod tests {
    use super::quantity_is_zero;

    #[test]
    fn quantity_syntax_and_zero() {
        for (q, zero) in [
            ("0", true),
            ("0Mi", true),
            ("0.0", true),
            ("100Mi", false),
            ("1.5Gi", false),
            ("500m", false),
            ("1e3", false),
            ("-1k", false),
            ("+2E-3", false),
        ] {
            assert_eq!(quantity_is_zero(q), Ok(zero), "{q}");
        }
        for bad in ["", "Mi", "1MB", "1..2", "1e", "abc"] {
            assert!(quantity_is_zero(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
