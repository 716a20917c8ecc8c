//! The upstream kubelet's command line (`cmd/kubelet/app/server.go` NewKubeletCommand,
//! `kubeletConfigFlagPrecedence`, parsed by `github.com/spf13/pflag`), in front of rkubelet's clap parser.
//!
//! Contract:
//! - Every flag the v1.35 kubelet registers ([`table::FLAGS`]) is accepted, with pflag's syntax: `--name=value`,
//!   `--name value` (a value flag takes the next argument, whatever it is), `--name` alone for a boolean, `-v N`,
//!   `-vN`, `-v=N`, and `_` for `-` in names (`cliflag.WordSepNormalizeFunc`).
//! - Flags rkubelet's own parser reads ([`Target::Cli`]) are handed to clap as `--name=value`; every other
//!   argument is handed over untouched, so an unknown flag is still clap's error naming it.
//! - A flag that sets a `KubeletConfiguration` field is checked when parsed, as its upstream type checks it
//!   (`invalid argument "x" for "--max-pods" flag: ...`), and [`apply`] sets it over the configuration file, as
//!   upstream re-parses the command line over the loaded file: the last occurrence wins, maps and lists follow
//!   their upstream type ([`values::Merge`]).
//! - A used deprecated flag gives pflag's warning `Flag --NAME has been deprecated, MESSAGE`; a flag without effect
//!   in rkubelet gives `Flag --NAME has no effect in rkubelet: REASON`.

pub mod table;
pub mod values;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::ffi::OsString;

use kubelet_config::kubelet_config::{ConfigError, KubeletConfiguration, from_yaml_str};
use serde_json::Value;

pub use table::{Flag, Target};
use values::{Kind, Merge};

/// A flag that changes the configuration, as given on the command line.
#[derive(Clone, Debug)]
pub struct Occurrence {
    /// The flag.
    pub flag: &'static Flag,
    /// The value as written.
    pub value: String,
    /// The value read by the flag's type ([`Kind::parse`]).
    pub parsed: Value,
}

/// The command line, sorted out.
#[derive(Debug, Default)]
pub struct CommandLine {
    /// What clap parses: the program name, rkubelet's own flags as `--name=value`, and every argument that is no
    /// upstream flag, untouched.
    pub clap_args: Vec<OsString>,
    /// The flags that set configuration fields, in command-line order.
    pub config_flags: Vec<Occurrence>,
    /// Warnings for stderr, in command-line order.
    pub warnings: Vec<String>,
}

/// Why the command line is refused; the message is pflag's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagError(pub String);

impl std::fmt::Display for FlagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FlagError {}

/// How pflag names a flag in its errors.
fn spelled(flag: &Flag) -> String {
    if flag.name == "v" { "-v, --v".to_string() } else { format!("--{}", flag.name) }
}

/// Sorts the command line (the program name first) into clap's arguments and the configuration flags.
pub fn split<I, T>(args: I) -> Result<CommandLine, FlagError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut args = args.into_iter().map(Into::into);
    let mut out = CommandLine::default();
    out.clap_args.extend(args.next());
    let mut labels: Option<OsString> = None;
    // rkubelet's own value flags: the last value of each wins, as pflag's; empty is upstream's default (unset).
    let mut own: Vec<(&'static str, OsString)> = vec![];
    // What follows `--`: no flags (upstream refuses them as commands; so does clap), after all flags.
    let mut trailing = vec![];
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            out.clap_args.push(arg);
            continue;
        };
        if text == "--" {
            trailing.push(arg);
            trailing.extend(args.by_ref());
            break;
        }
        let (flag, inline) = if let Some(body) = text.strip_prefix("--").filter(|b| !b.starts_with('-')) {
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (body, None),
            };
            match table::lookup(&name.replace('_', "-")) {
                Some(flag) => (flag, inline.map(OsString::from)),
                None => {
                    out.clap_args.push(arg);
                    continue;
                }
            }
        } else if let Some(rest) = text.strip_prefix("-v") {
            // pflag's shorthand: `-v=N`, `-vN`, or `-v N`.
            let inline = rest.strip_prefix('=').or(Some(rest).filter(|r| !r.is_empty()));
            (table::lookup("v").expect("-v is in the table"), inline.map(OsString::from))
        } else {
            out.clap_args.push(arg);
            continue;
        };
        let value = match inline {
            Some(v) => v,
            None if flag.kind.is_bool() => OsString::from("true"),
            None => match args.next() {
                Some(v) => v,
                None if flag.name == "v" => return Err(FlagError("flag needs an argument: 'v' in -v".into())),
                None => return Err(FlagError(format!("flag needs an argument: {text}"))),
            },
        };
        if flag.target == Target::Cli && !flag.kind.is_bool() {
            if flag.name == "node-labels" {
                // A `ConfigurationMap`: every occurrence adds its labels, later keys win.
                let joined = labels.get_or_insert_with(OsString::new);
                if !joined.is_empty() {
                    joined.push(",");
                }
                joined.push(&value);
            } else {
                own.retain(|(name, _)| *name != flag.name);
                own.push((flag.name, value));
            }
            continue;
        }
        let value = value.into_string().map_err(|v| FlagError(format!("flag --{}: {v:?} is not UTF-8", flag.name)))?;
        let invalid = |e: String| FlagError(format!("invalid argument {value:?} for {:?} flag: {e}", spelled(flag)));
        let parsed = flag.kind.parse(&value).map_err(invalid)?;
        if let Some(message) = flag.deprecated {
            out.warnings.push(format!("Flag --{} has been deprecated, {message}", flag.name));
        }
        match flag.target {
            Target::Cli => {
                // `--help` and `--version`, booleans for clap; verflag also takes `raw` and a version to report.
                match &parsed {
                    Value::Bool(false) => {}
                    Value::String(v) if v == "false" => {}
                    Value::String(v) if v.starts_with('v') => {
                        out.warnings.push(no_effect(flag, "rkubelet always reports the Kubernetes version it follows"))
                    }
                    _ => out.clap_args.push(OsString::from(format!("--{}", flag.name))),
                }
            }
            Target::Config(_) | Target::ConfigIfTrue(_) => {
                out.config_flags.push(Occurrence { flag, value, parsed });
            }
            Target::Discarded => {
                if flag.name == "pod-infra-container-image" {
                    // Upstream's log line when the flag is set.
                    out.warnings.push(
                        "--pod-infra-container-image will not be pruned by the image garbage collector in kubelet \
                         and should also be set in the remote runtime"
                            .into(),
                    );
                }
            }
            Target::NoEffect(why) => out.warnings.push(no_effect(flag, why)),
        }
    }
    for (name, value) in own.into_iter().filter(|(_, v)| !v.is_empty()).chain(labels.map(|l| ("node-labels", l))) {
        let mut spelled = OsString::from(format!("--{name}="));
        spelled.push(value);
        out.clap_args.push(spelled);
    }
    out.clap_args.extend(trailing);
    Ok(out)
}

fn no_effect(flag: &Flag, why: &str) -> String {
    format!("Flag --{} has no effect in rkubelet: {why}", flag.name)
}

/// Sets the configuration flags over `cfg` (the configuration file, or the defaults without one), as upstream's
/// `kubeletConfigFlagPrecedence` does. The result is decoded as a configuration file is, so a value the field
/// refuses names the flag and the field.
pub fn apply(cfg: &mut KubeletConfiguration, flags: &[Occurrence]) -> Result<(), FlagError> {
    if flags.is_empty() {
        return Ok(());
    }
    let mut doc = serde_json::to_value(&*cfg).map_err(|e| FlagError(format!("encode the configuration: {e}")))?;
    let mut started = BTreeSet::new();
    for o in flags {
        let first = started.insert(o.flag.name);
        match o.flag.target {
            Target::Config(path) => set(&mut doc, path, o.flag.kind, first, o.parsed.clone()),
            Target::ConfigIfTrue(path) if o.parsed == Value::Bool(true) => *field(&mut doc, path) = Value::Bool(true),
            _ => {}
        }
    }
    *cfg = from_yaml_str(&doc.to_string(), "command line").map_err(|e| match e {
        ConfigError::Field { field, message, .. } => {
            let o = flags.iter().rev().find(|o| match o.flag.target {
                Target::Config(path) | Target::ConfigIfTrue(path) => {
                    field == path || field.starts_with(&format!("{path}.")) || field.starts_with(&format!("{path}["))
                }
                _ => false,
            });
            match o {
                Some(o) => FlagError(format!(
                    "invalid argument {:?} for {:?} flag: field {field}: {message}",
                    o.value,
                    spelled(o.flag)
                )),
                None => FlagError(format!("field {field}: {message}")),
            }
        }
        other => FlagError(other.to_string()),
    })?;
    Ok(())
}

/// The field at a dotted JSON path, created (as an empty object on the way) when missing.
fn field<'a>(doc: &'a mut Value, path: &str) -> &'a mut Value {
    path.split('.').fold(doc, |node, key| {
        if !node.is_object() {
            *node = Value::Object(Default::default());
        }
        node.as_object_mut().expect("made an object").entry(key).or_insert(Value::Null)
    })
}

/// Sets one occurrence of a flag at `path`; `first` is whether it is the flag's first occurrence.
fn set(doc: &mut Value, path: &str, kind: Kind, first: bool, value: Value) {
    if value.is_null() {
        return;
    }
    let target = field(doc, path);
    let merge = kind.merge();
    let replace = merge == Merge::Replace
        || (first
            && matches!(merge, Merge::ReplaceThenAppend | Merge::ReplaceThenInsert | Merge::ReplaceThenAppendValues));
    if replace || target.is_null() {
        *target = value;
        return;
    }
    match (target, value) {
        (Value::Array(items), Value::Array(more)) => items.extend(more),
        (Value::Object(map), Value::Object(more)) => {
            for (k, v) in more {
                match (map.get_mut(&k), v) {
                    (Some(Value::Array(items)), Value::Array(more)) if merge == Merge::ReplaceThenAppendValues => {
                        items.extend(more)
                    }
                    (_, v) => {
                        map.insert(k, v);
                    }
                }
            }
        }
        (target, value) => *target = value,
    }
}
