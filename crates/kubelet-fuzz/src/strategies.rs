//! Strategies shared by the targets: hostile text from a dictionary of tokens, huge digit strings, and
//! structure-aware documents: a valid JSON value (a configuration, a pod) with mutations at random places,
//! printed as JSON or as block YAML, with YAML's own tricks (anchors, aliases, tags, an alias bomb, deep nesting)
//! spliced in.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value};

/// Arbitrary Unicode text, short.
pub fn any_text() -> BoxedStrategy<String> {
    proptest::collection::vec(any::<char>(), 0..48).prop_map(|c| c.into_iter().collect()).boxed()
}

/// Text built from `tokens` (joined without separator), arbitrary characters mixed in, or one token repeated
/// many times.
pub fn text_from(tokens: &'static [&'static str]) -> BoxedStrategy<String> {
    let piece = prop_oneof![
        6 => select(tokens).prop_map(str::to_string),
        1 => any::<char>().prop_map(|c| c.to_string()),
        1 => digits(),
    ];
    prop_oneof![
        6 => proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat()),
        1 => any_text(),
        1 => (select(tokens), 1usize..4096).prop_map(|(t, n)| t.repeat(n)),
    ]
    .boxed()
}

/// A decimal number of 1 to 40 digits, or now and then of thousands.
pub fn digits() -> BoxedStrategy<String> {
    prop_oneof![
        8 => (0u64..1000).prop_map(|n| n.to_string()),
        4 => any::<u64>().prop_map(|n| n.to_string()),
        2 => "[0-9]{1,40}",
        1 => huge_digits(),
    ]
    .boxed()
}

/// A decimal number of up to 20 000 digits.
pub fn huge_digits() -> BoxedStrategy<String> {
    (1usize..20_000, select(&["9", "0", "1", "5"][..])).prop_map(|(n, d)| format!("1{}", d.repeat(n))).boxed()
}

/// Strings that trip parsers: numbers with odd suffixes, durations, paths, escapes, Unicode, huge values.
pub const HOSTILE_STRINGS: &[&str] = &[
    "",
    " ",
    "0",
    "-1",
    "+1",
    "1e400",
    "-1e-400",
    "1e2147483647",
    "1e-2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551616",
    "NaN",
    "inf",
    ".inf",
    "0x10",
    "0o777",
    "0440",
    "1.5",
    ".",
    "..",
    "1..2",
    "100m",
    "1Ki",
    "1Ei",
    "8Ei",
    "1E",
    "1e",
    "1e+",
    "1ee3",
    "-0",
    "1%",
    "100%",
    "-5%",
    "1e10%",
    "%",
    "1h2m3.5s",
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "-1s",
    "1.s",
    ".5µs",
    "1μs",
    "10",
    "1d",
    "0-3,8",
    "3-1",
    "0-18446744073709551615",
    "/",
    "../../etc/passwd",
    "a/../b",
    "%2f",
    "//",
    "\\",
    "\u{0}",
    "\u{feff}",
    "\u{202e}",
    "\u{1F600}",
    "é",
    "\r\n",
    "\t",
    "a\nb",
    "'",
    "\"",
    "{",
    "[",
    "${HOME}",
    "$(rm -rf /)",
    "kubernetes.io/hostname",
    "node-role.kubernetes.io/master",
    "a.b/c",
    "A_B",
    "-a",
    "a-",
    "memory.available",
    "nodefs.inodesFree",
    "pods",
    "Always",
    "TCP",
    "Exists",
    "NoExecute",
    "default",
    "kube-system",
    "unix:///run/containerd/containerd.sock",
    "http://127.0.0.1:1/x",
    "127.0.0.1",
    "::1",
    "999.1.1.1",
    "10.0.0.0/8",
    "localhost/",
    "localhost/../x",
    "localhost//a",
    "runtime/default",
    "hugepages-",
    "1Gi1",
    "$(A)",
    "$$(A)",
    "$(",
];

/// A scalar or small container of hostile values, and now and then a raw splice ([`raw`]).
pub fn hostile_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        select(&[0i64, 1, -1, 2, 30, 65535, 65536, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN][..])
            .prop_map(Value::from),
        select(&[0.5f64, -0.0, 1e308, -1e308, 1e-308, 3.999999, 1e19][..]).prop_map(Value::from),
        select(HOSTILE_STRINGS).prop_map(|s| Value::String(s.to_string())),
        digits().prop_map(Value::String),
        any_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(select(HOSTILE_STRINGS), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
    .boxed()
}

/// A mutation of a JSON document, at the node picked by an index into its nodes in document order.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Replace the node.
    Set(Index, Value),
    /// Remove the node from its parent.
    Remove(Index),
    /// Add a key to the nearest object at or above the node.
    Add(Index, String, Value),
    /// Repeat an array element (or wrap the node in an array) `n` times.
    Repeat(Index, u16),
    /// Replace the node with a raw splice (printed as is, see [`raw`]).
    Raw(Index, String),
}

/// Mutations of a document: a few, each at a random node.
pub fn mutations(keys: &'static [&'static str]) -> BoxedStrategy<Vec<Mutation>> {
    let m = prop_oneof![
        6 => (any::<Index>(), hostile_value()).prop_map(|(i, v)| Mutation::Set(i, v)),
        2 => any::<Index>().prop_map(Mutation::Remove),
        2 => (any::<Index>(), select(keys).prop_map(str::to_string), hostile_value())
            .prop_map(|(i, k, v)| Mutation::Add(i, k, v)),
        1 => (any::<Index>(), 0u16..2000).prop_map(|(i, n)| Mutation::Repeat(i, n)),
        1 => (any::<Index>(), raw()).prop_map(|(i, r)| Mutation::Raw(i, r)),
    ];
    proptest::collection::vec(m, 0..6).boxed()
}

/// Marker of a raw splice inside a string value.
const RAW: char = '\u{1}';

/// Text that only a raw splice can make: deep nesting, long flow lists, YAML anchors and tags.
pub fn raw() -> BoxedStrategy<String> {
    prop_oneof![
        (1usize..3000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        (1usize..3000).prop_map(|n| format!("{}1{}", "{\"a\": ".repeat(n), "}".repeat(n))),
        (1usize..3000).prop_map(|n| "[".repeat(n)),
        (1usize..5000).prop_map(|n| format!("[{}0]", "0,".repeat(n))),
        select(
            &["&a 1", "*a", "*nope", "!!binary aGk=", "!!str 1", "!!int x", "!custom 1", "!!map {}", "? a", "|\n  x\n"]
                [..]
        )
        .prop_map(str::to_string),
    ]
    .boxed()
}

/// Every node of `v`, in document order, as paths of keys and indices.
fn node_paths(v: &Value, path: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(path.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(PathStep::Key(k.clone()));
                node_paths(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(PathStep::At(i));
                node_paths(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    At(usize),
}

fn node_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        PathStep::Key(k) => v.get_mut(k.as_str()),
        PathStep::At(i) => v.get_mut(*i),
    })
}

/// Applies `muts` to `doc`; raw splices become [`RAW`]-marked strings that the printers put out as they are.
pub fn apply(doc: &mut Value, muts: &[Mutation], raws: &mut Vec<String>) {
    for m in muts {
        let mut paths = vec![];
        node_paths(doc, &mut vec![], &mut paths);
        let pick = |i: &Index| paths[i.index(paths.len())].clone();
        match m {
            Mutation::Set(i, x) => {
                if let Some(n) = node_mut(doc, &pick(i)) {
                    *n = x.clone();
                }
            }
            Mutation::Remove(i) => {
                let mut p = pick(i);
                let Some(last) = p.pop() else { continue };
                match (node_mut(doc, &p), last) {
                    (Some(Value::Object(o)), PathStep::Key(k)) => {
                        o.remove(&k);
                    }
                    (Some(Value::Array(a)), PathStep::At(at)) if at < a.len() => {
                        a.remove(at);
                    }
                    _ => {}
                }
            }
            Mutation::Add(i, k, x) => {
                let mut p = pick(i);
                loop {
                    if let Some(Value::Object(o)) = node_mut(doc, &p) {
                        o.insert(k.clone(), x.clone());
                        break;
                    }
                    if p.pop().is_none() {
                        break;
                    }
                }
            }
            Mutation::Repeat(i, n) => {
                if let Some(node) = node_mut(doc, &pick(i)) {
                    let item = match &*node {
                        Value::Array(a) if !a.is_empty() => a[0].clone(),
                        other => other.clone(),
                    };
                    *node = Value::Array(vec![item; usize::from(*n)]);
                }
            }
            Mutation::Raw(i, text) => {
                if let Some(n) = node_mut(doc, &pick(i)) {
                    *n = Value::String(format!("{RAW}{}", raws.len()));
                    raws.push(text.clone());
                }
            }
        }
    }
}

/// `doc` as JSON text, raw splices in place.
pub fn to_json(doc: &Value, raws: &[String], pretty: bool) -> String {
    let mut s = if pretty { serde_json::to_string_pretty(doc) } else { serde_json::to_string(doc) }.unwrap_or_default();
    for (i, r) in raws.iter().enumerate() {
        s = s.replace(&format!("\"\\u0001{i}\""), r);
    }
    s
}

/// Plain words YAML 1.1 reads as booleans, nulls or numbers.
const YAML_WORDS: &[&str] = &["true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"];

fn yaml_scalar(v: &Value, raws: &[String]) -> String {
    match v {
        Value::String(s) if s.starts_with(RAW) => {
            s[1..].parse::<usize>().ok().and_then(|i| raws.get(i)).cloned().unwrap_or_default()
        }
        // Plain when YAML reads it back as the same string (not a number, boolean or null).
        Value::String(s)
            if s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
                && !YAML_WORDS.contains(&s.to_ascii_lowercase().as_str()) =>
        {
            s.clone()
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn yaml_into(v: &Value, indent: usize, raws: &[String], out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                out.push_str(&pad);
                out.push_str(&yaml_scalar(&Value::String(k.clone()), raws));
                out.push(':');
                yaml_child(x, indent, raws, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for x in a {
                out.push_str(&pad);
                out.push('-');
                yaml_child(x, indent, raws, out);
            }
        }
        other => {
            out.push_str(&pad);
            out.push_str(&yaml_block_scalar(other, raws));
            out.push('\n');
        }
    }
}

fn yaml_block_scalar(v: &Value, raws: &[String]) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => yaml_scalar(other, raws),
    }
}

fn yaml_child(x: &Value, indent: usize, raws: &[String], out: &mut String) {
    match x {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            yaml_into(x, indent + 2, raws, out);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            yaml_into(x, indent + 2, raws, out);
        }
        other => {
            out.push(' ');
            out.push_str(&yaml_block_scalar(other, raws));
            out.push('\n');
        }
    }
}

/// `doc` as block YAML, raw splices in place.
pub fn to_yaml(doc: &Value, raws: &[String]) -> String {
    let mut out = String::new();
    yaml_into(doc, 0, raws, &mut out);
    out
}

/// YAML fragments spliced into the text of a document.
const YAML_TRICKS: &[&str] = &[
    "&a ",
    "*a",
    "<<: *a\n",
    "!!binary ",
    "!!str ",
    "!!null ",
    "? ",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "\t",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "%TAG ! tag:x,2000:\n",
    "\"",
    "'",
    "|\n",
    ">-\n",
    "#",
    "\u{feff}",
    "\r",
    ": ",
    ",",
    "\n  ",
    "~",
    "\\",
    "@",
    "`",
];

/// An edit of the text of a document.
#[derive(Clone, Debug)]
pub enum TextEdit {
    /// Insert a fragment at a position.
    Insert(Index, String),
    /// Remove a range.
    Cut(Index, u8),
    /// Cut the text short.
    Truncate(Index),
}

/// A few edits of document text.
pub fn text_edits() -> BoxedStrategy<Vec<TextEdit>> {
    let e = prop_oneof![
        4 => (any::<Index>(), select(YAML_TRICKS).prop_map(str::to_string)).prop_map(|(i, s)| TextEdit::Insert(i, s)),
        1 => (any::<Index>(), any_text()).prop_map(|(i, s)| TextEdit::Insert(i, s)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, n)| TextEdit::Cut(i, n)),
        1 => any::<Index>().prop_map(TextEdit::Truncate),
    ];
    prop_oneof![3 => Just(vec![]), 2 => proptest::collection::vec(e, 1..4)].boxed()
}

fn boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Applies text edits.
pub fn edit(mut s: String, edits: &[TextEdit]) -> String {
    for e in edits {
        match e {
            TextEdit::Insert(i, frag) => {
                let at = boundary(&s, i.index(s.len() + 1));
                s.insert_str(at, frag);
            }
            TextEdit::Cut(i, n) => {
                let a = boundary(&s, i.index(s.len() + 1));
                let b = boundary(&s, a + usize::from(*n));
                s.replace_range(a..b, "");
            }
            TextEdit::Truncate(i) => {
                let at = boundary(&s, i.index(s.len() + 1));
                s.truncate(at);
            }
        }
    }
    s
}

/// A YAML alias bomb ("billion laughs"): `levels` anchors, each a list of `width` aliases of the previous, and a
/// key `bomb` naming the last.
pub fn alias_bomb(levels: usize, width: usize) -> String {
    let mut s = String::from("l0: &l0 [\"lol\"]\n");
    for l in 1..=levels {
        let items = vec![format!("*l{}", l - 1); width].join(", ");
        s.push_str(&format!("l{l}: &l{l} [{items}]\n"));
    }
    s.push_str(&format!("bomb: *l{levels}\n"));
    s
}

/// How a structured document is printed.
#[derive(Clone, Debug)]
pub struct Doc {
    /// The mutations of the base document.
    pub mutations: Vec<Mutation>,
    /// JSON (compact or pretty) or block YAML.
    pub format: DocFormat,
    /// Edits of the printed text.
    pub edits: Vec<TextEdit>,
}

/// The printed form of a document.
#[derive(Clone, Copy, Debug)]
pub enum DocFormat {
    /// Compact JSON.
    Json,
    /// Indented JSON.
    JsonPretty,
    /// Block YAML.
    Yaml,
    /// JSON after a YAML comment (so the YAML parser reads the JSON).
    JsonAsYaml,
    /// Block YAML after an alias bomb of (levels, width).
    YamlBomb(u8, u8),
}

/// Documents: mutations of a base document (whose keys `keys` are also added), printed, then edited.
pub fn doc(keys: &'static [&'static str]) -> BoxedStrategy<Doc> {
    let format = prop_oneof![
        3 => Just(DocFormat::Yaml),
        2 => Just(DocFormat::Json),
        1 => Just(DocFormat::JsonPretty),
        1 => Just(DocFormat::JsonAsYaml),
        1 => (1u8..11, 2u8..6).prop_map(|(l, w)| DocFormat::YamlBomb(l, w)),
    ];
    (mutations(keys), format, text_edits())
        .prop_map(|(mutations, format, edits)| Doc { mutations, format, edits })
        .boxed()
}

impl Doc {
    /// The text of the document made from `base`.
    pub fn render(&self, base: &Value) -> String {
        let mut v = base.clone();
        let mut raws = vec![];
        apply(&mut v, &self.mutations, &mut raws);
        let text = match self.format {
            DocFormat::Json => to_json(&v, &raws, false),
            DocFormat::JsonPretty => to_json(&v, &raws, true),
            DocFormat::Yaml => to_yaml(&v, &raws),
            DocFormat::JsonAsYaml => format!("# json\n{}", to_json(&v, &raws, false)),
            DocFormat::YamlBomb(l, w) => {
                format!("{}{}", alias_bomb(usize::from(l), usize::from(w)), to_yaml(&v, &raws))
            }
        };
        edit(text, &self.edits)
    }
}

/// An object from pairs (for the base documents).
pub fn object(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())
}
