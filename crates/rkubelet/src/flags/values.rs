//! How the upstream kubelet's flag types read a value (their `pflag.Value.Set`), turned into the JSON a
//! `KubeletConfiguration` field takes:
//! - pflag's `bool`, `int32`, `int64`, `duration`, `string` and `stringSlice` (`github.com/spf13/pflag`), which use
//!   Go's `strconv.ParseBool`, `strconv.ParseInt(s, 0, bits)`, `time.ParseDuration` and `encoding/csv`;
//! - component-base `cli/flag`: `MapStringString` (and its `NoSplit` form), `LangleSeparatedMapStringString`,
//!   `MapStringBool`, `ColonSeparatedMultimapStringString`, `ConfigurationMap`;
//! - `pkg/util/flag`: `IPVar`, `ReservedMemoryVar`, `RegisterWithTaintsVar` (with `pkg/util/taints` ParseTaints);
//! - component-base `logs/api/v1`: the verbosity level (`-v`) and `--vmodule`; `resource.QuantityValue`.
//!
//! [`Kind::parse`] checks a value as upstream does when the flag is parsed, so a bad value is refused naming the
//! flag; the error text is upstream's, which pflag prefixes with `invalid argument "VALUE" for "--NAME" flag: `.

use kubelet_config::kubelet_config::Duration;
use kubelet_config::validation::field::Path;
use kubelet_config::validation::names::{is_label_value, is_qualified_name, validate_ip_legacy};
use kubelet_types::quantity::ParsedQuantity;
use serde_json::{Map, Value, json};

/// The type of a flag's value, named after the upstream type that parses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// pflag `bool`: `--flag` alone means true.
    Bool,
    /// pflag `string`.
    Str,
    /// pflag `int32`.
    Int32,
    /// pflag `int32` or Go `flag.Int`/`int64`.
    Int64,
    /// The log verbosity (`-v`): an unsigned number below 2^31.
    Level,
    /// pflag `duration`.
    Duration,
    /// `IPVar`: an IP address; empty leaves the field alone.
    Ip,
    /// pflag `stringSlice`: comma-separated (CSV); repeated flags append.
    StrSlice,
    /// `MapStringString`: `k=v,k2=v2`.
    Map,
    /// `MapStringString` without splitting on commas: one `k=v` per flag.
    MapNoSplit,
    /// `LangleSeparatedMapStringString`: `k<v,k2<v2`.
    LangleMap,
    /// `MapStringBool`: `k=true,k2=false`; merged into the configuration file's map.
    MapBool,
    /// `ColonSeparatedMultimapStringString`: `k:v,k:v2`.
    ColonMultimap,
    /// `ConfigurationMap` (`--node-labels`): `k=v`, or `k` for an empty value; repeated flags merge.
    Labels,
    /// `ReservedMemoryVar`: `0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi`.
    ReservedMemory,
    /// `RegisterWithTaintsVar`: `key=value:Effect,...`.
    Taints,
    /// `--vmodule`: `pattern=N,...`, appended to the configuration file's list.
    VModule,
    /// `resource.QuantityValue`.
    Quantity,
    /// verflag's version value: a boolean, `raw`, or `vX.Y.Z`.
    Version,
}

/// How repeated occurrences of a flag, and the configuration file's value, combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// The flag's value replaces the field's.
    Replace,
    /// The first occurrence replaces the field, later ones append to the list.
    ReplaceThenAppend,
    /// The first occurrence replaces the field, later ones add keys to the map.
    ReplaceThenInsert,
    /// The first occurrence replaces the field, later ones append to the lists of the map.
    ReplaceThenAppendValues,
    /// Keys are added to the field's map (the file's keys stay).
    Insert,
    /// Items are appended to the field's list (the file's items stay).
    Append,
}

impl Kind {
    /// Whether the flag is boolean in pflag's sense: `--flag` alone means `--flag=true`, and the next argument is
    /// never taken as its value.
    pub fn is_bool(self) -> bool {
        matches!(self, Kind::Bool | Kind::Version)
    }

    /// How occurrences of the flag combine with the field's value.
    pub fn merge(self) -> Merge {
        match self {
            Kind::StrSlice | Kind::ReservedMemory => Merge::ReplaceThenAppend,
            Kind::Map | Kind::MapNoSplit | Kind::LangleMap => Merge::ReplaceThenInsert,
            Kind::ColonMultimap => Merge::ReplaceThenAppendValues,
            Kind::MapBool | Kind::Labels => Merge::Insert,
            Kind::VModule => Merge::Append,
            _ => Merge::Replace,
        }
    }

    /// Reads `s` as the upstream type does. `Ok(Value::Null)` means the value changes nothing (an empty `IPVar` or
    /// `ReservedMemoryVar`).
    pub fn parse(self, s: &str) -> Result<Value, String> {
        Ok(match self {
            Kind::Bool => Value::Bool(parse_bool(s)?),
            Kind::Str => Value::String(s.to_string()),
            Kind::Int32 => json!(parse_int(s, 32)?),
            Kind::Int64 => json!(parse_int(s, 64)?),
            Kind::Level => json!(parse_level(s)?),
            Kind::Duration => {
                Duration::parse(s).map_err(|e| format!("time: {e}"))?;
                Value::String(s.to_string())
            }
            Kind::Ip if s.is_empty() => Value::Null,
            Kind::Ip => {
                if !validate_ip_legacy(&Path::new("ip"), s).0.is_empty() {
                    return Err(format!("{s:?} is not a valid IP address"));
                }
                Value::String(s.to_string())
            }
            Kind::StrSlice => Value::Array(read_csv(s)?.into_iter().map(Value::String).collect()),
            Kind::Map => pairs(s, true, '=', "string=string")?,
            Kind::MapNoSplit => pairs(s, false, '=', "string=string")?,
            Kind::LangleMap => pairs(s, true, '<', "string<string")?,
            Kind::MapBool => map_bool(s)?,
            Kind::ColonMultimap => colon_multimap(s)?,
            Kind::Labels => labels(s),
            Kind::ReservedMemory => reserved_memory(s)?,
            Kind::Taints => taints(s)?,
            Kind::VModule => vmodule(s)?,
            Kind::Quantity => {
                ParsedQuantity::parse(s).map_err(|e| e.to_string())?;
                Value::String(s.to_string())
            }
            Kind::Version => Value::String(version(s)?),
        })
    }
}

fn syntax(func: &str, s: &str) -> String {
    format!("strconv.{func}: parsing {s:?}: invalid syntax")
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(syntax("ParseBool", s)),
    }
}

/// Go's `strconv.ParseInt(s, 0, bits)`: an optional sign, then decimal, `0x` hex, `0o`/`0` octal or `0b` binary,
/// with `_` allowed between digits.
pub fn parse_int(s: &str, bits: u32) -> Result<i64, String> {
    let range = || format!("strconv.ParseInt: parsing {s:?}: value out of range");
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !underscores_ok(unsigned) {
        return Err(syntax("ParseInt", s));
    }
    let mut magnitude: u128 = 0;
    for c in digits.chars().filter(|c| *c != '_') {
        let d = c.to_digit(radix).ok_or_else(|| syntax("ParseInt", s))?;
        magnitude = (magnitude * u128::from(radix) + u128::from(d)).min(u128::from(u64::MAX) + 1);
    }
    let limit = 1u128 << (bits - 1);
    if (negative && magnitude > limit) || (!negative && magnitude >= limit) {
        return Err(range());
    }
    let value = i64::try_from(magnitude).unwrap_or(i64::MIN);
    Ok(if negative { value.wrapping_neg() } else { value })
}

/// Go's `underscoreOK`: underscores only between digits, or right after a base prefix.
fn underscores_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut saw = b'^';
    let (mut i, mut hex) = (0, false);
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'x' | b'o' | b'b') {
        (i, saw, hex) = (2, b'0', b[1] | 0x20 == b'x');
    }
    for &c in &b[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// The verbosity level: Go's `strconv.ParseUint(s, 10, 31)`.
fn parse_level(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(syntax("ParseUint", s));
    }
    match s.parse::<u64>() {
        Ok(v) if v < 1 << 31 => Ok(v as u32),
        _ => Err(format!("strconv.ParseUint: parsing {s:?}: value out of range")),
    }
}

/// pflag's `readAsCSV`: one CSV record, fields may be double-quoted (`""` inside quotes is a quote).
fn read_csv(s: &str) -> Result<Vec<String>, String> {
    if s.is_empty() {
        return Ok(vec![]);
    }
    let record = s.split(['\n', '\r']).next().unwrap_or("");
    let (mut fields, mut chars) = (vec![], record.chars().peekable());
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("parse error on line 1: extraneous or missing \" in quoted-field".into()),
                }
            }
            if !matches!(chars.peek(), None | Some(',')) {
                return Err("parse error on line 1: extraneous or missing \" in quoted-field".into());
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                if c == '"' {
                    return Err("parse error on line 1: bare \" in non-quoted-field".into());
                }
                field.push(c);
            }
        }
        fields.push(field);
        if chars.next().is_none() {
            return Ok(fields);
        }
    }
}

/// `MapStringString` (`split`) and `LangleSeparatedMapStringString`: pairs separated by commas, key and value
/// trimmed; an empty item is skipped.
fn pairs(s: &str, split: bool, sep: char, expect: &str) -> Result<Value, String> {
    let items: Vec<&str> = if split { s.split(',').filter(|i| !i.is_empty()).collect() } else { vec![s] };
    let mut map = Map::new();
    for item in items {
        let (k, v) = item.split_once(sep).ok_or_else(|| format!("malformed pair, expect {expect}"))?;
        map.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
    }
    Ok(Value::Object(map))
}

/// `MapStringBool` (`--feature-gates`).
fn map_bool(s: &str) -> Result<Value, String> {
    let mut map = Map::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').ok_or("malformed pair, expect string=bool")?;
        let (k, v) = (k.trim(), v.trim());
        let b = parse_bool(v).map_err(|e| format!("invalid value of {k}: {v}, err: {e}"))?;
        map.insert(k.to_string(), Value::Bool(b));
    }
    Ok(Value::Object(map))
}

/// `ColonSeparatedMultimapStringString` (`--manifest-url-header`): `name:value` pairs, values of one name in order.
fn colon_multimap(s: &str) -> Result<Value, String> {
    let mut map = Map::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once(':').ok_or("malformed pair, expect string:string")?;
        let list = map.entry(k.trim()).or_insert_with(|| Value::Array(vec![]));
        if let Value::Array(values) = list {
            values.push(Value::String(v.trim().to_string()));
        }
    }
    Ok(Value::Object(map))
}

/// `ConfigurationMap`: like `MapStringString`, but an item without `=` is a key with an empty value.
fn labels(s: &str) -> Value {
    let mut map = Map::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item.split_once('=').unwrap_or((item, ""));
        map.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
    }
    Value::Object(map)
}

/// `ReservedMemoryVar`: NUMA node reservations separated by `;`.
fn reserved_memory(s: &str) -> Result<Value, String> {
    if s.is_empty() {
        return Ok(Value::Null);
    }
    let mut out = vec![];
    for reservation in s.split(';') {
        let format = || {
            format!(
                "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got {reservation}"
            )
        };
        let parts: Vec<&str> = reservation.split(':').collect();
        let [node, limits] = parts[..] else { return Err(format()) };
        let numa: i32 =
            go_atoi(node).ok_or_else(|| format!("failed to convert the NUMA node ID, expected integer, got {node}"))?;
        let mut map = Map::new();
        for limit in limits.split(',') {
            let kv: Vec<&str> = limit.split('=').collect();
            let [name, quantity] = kv[..] else {
                return Err(format!("the reserved limit has incorrect value, expected type=quantity, got {limit}"));
            };
            if name != "memory" && !name.starts_with("hugepages-") {
                return Err(format!("memory type conversion error, unknown type: {name:?}"));
            }
            ParsedQuantity::parse(quantity).map_err(|_| format!("failed to parse the quantity: {quantity}"))?;
            map.insert(name.to_string(), Value::String(quantity.to_string()));
        }
        out.push(json!({ "numaNode": numa, "limits": map }));
    }
    Ok(Value::Array(out))
}

/// Go's `strconv.Atoi` into an `int32` (as `int32(numaNodeID)` would keep it).
fn go_atoi(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok().map(|v| v as i32)
}

/// `RegisterWithTaintsVar` with `ParseTaints`: `key[=value]:Effect` items; `...-` (a removal) is accepted and
/// dropped; a key and effect may appear once.
fn taints(s: &str) -> Result<Value, String> {
    let mut out: Vec<Value> = vec![];
    let mut seen = std::collections::BTreeSet::new();
    for spec in s.split(',').filter(|_| !s.is_empty()) {
        if let Some(removal) = spec.strip_suffix('-') {
            parse_taint(removal)?;
            continue;
        }
        let (key, value, effect) = parse_taint(spec)?;
        if effect.is_empty() {
            return Err(format!("invalid taint spec: {spec}"));
        }
        if !seen.insert((effect.clone(), key.clone())) {
            return Err(format!("duplicated taints with the same key and effect: {{{key} {value} {effect} nil}}"));
        }
        let mut taint = json!({ "key": key, "effect": effect });
        if !value.is_empty() {
            taint["value"] = Value::String(value);
        }
        out.push(taint);
    }
    Ok(Value::Array(out))
}

/// `parseTaint`: the key, value and effect of `key[=value][:Effect]`.
fn parse_taint(spec: &str) -> Result<(String, String, String), String> {
    let invalid = |why: Vec<String>| {
        if why.is_empty() {
            format!("invalid taint spec: {spec}")
        } else {
            format!("invalid taint spec: {spec}, {}", why.join("; "))
        }
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (key, value, effect) = match parts[..] {
        [key] => (key, "", ""),
        [kv, effect] => {
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(format!("invalid taint effect: {effect}, unsupported taint effect"));
            }
            let kv: Vec<&str> = kv.split('=').collect();
            match kv[..] {
                [key] => (key, "", effect),
                [key, value] => {
                    let errs = is_label_value(value);
                    if !errs.is_empty() {
                        return Err(invalid(errs));
                    }
                    (key, value, effect)
                }
                _ => return Err(invalid(vec![])),
            }
        }
        _ => return Err(invalid(vec![])),
    };
    let errs = is_qualified_name(key);
    if !errs.is_empty() {
        return Err(invalid(errs));
    }
    Ok((key.to_string(), value.to_string(), effect.to_string()))
}

/// `--vmodule`: `pattern=N` items, N below 2^31.
fn vmodule(s: &str) -> Result<Value, String> {
    let mut out = vec![];
    for pat in s.split(',').filter(|p| !p.is_empty()) {
        let parts: Vec<&str> = pat.split('=').collect();
        let [pattern, level] = parts[..] else { return Err(format!("{pat:?} does not have the pattern=N format")) };
        if pattern.is_empty() || level.is_empty() {
            return Err(format!("{pat:?} does not have the pattern=N format"));
        }
        let v = parse_level(level).map_err(|e| format!("parsing verbosity in {pat:?}: {e}"))?;
        out.push(json!({ "filePattern": pattern, "verbosity": v }));
    }
    Ok(Value::Array(out))
}

/// verflag's `versionValue.Set`: `raw`, `vX.Y.Z` (a version to report) or a boolean; the result is `true`, `false`,
/// `raw` or the version.
fn version(s: &str) -> Result<String, String> {
    if s == "raw" || s.starts_with('v') {
        return Ok(s.to_string());
    }
    parse_bool(s).map(|b| b.to_string())
}
