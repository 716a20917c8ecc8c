//! `--config-dir`: drop-in configuration files (`cmd/kubelet/app/server.go` mergeKubeletConfigurations,
//! `loadDropinConfigFileIntoJSON`).
//!
//! Contract: every `*.conf` file under the directory, walked depth-first in lexical order as Go's
//! `filepath.WalkDir` does, is a `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` (YAML or JSON, `apiVersion`
//! and `kind` required) merged as a JSON merge patch (RFC 7386) over the configuration so far, in that order (a
//! later file wins; maps merge key by key, `null` removes a field); upstream's defaults then fill what is unset.
//! Relative paths in drop-ins are kept as written, as upstream. Unlike upstream, which ignores them, unknown
//! fields are refused, naming the file and the field.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kubelet_config::kubelet_config::{API_VERSION, KIND, KubeletConfiguration, from_yaml_str};
use serde_json::Value;

/// Merges the drop-ins of `dir` over `cfg`.
pub fn merge(cfg: &mut KubeletConfiguration, dir: &Path) -> anyhow::Result<()> {
    let mut files = vec![];
    walk(dir, &mut files).with_context(|| format!("walk the kubelet drop-in directory {}", dir.display()))?;
    if files.is_empty() {
        return Ok(());
    }
    let mut merged = serde_json::to_value(&*cfg).context("encode the configuration")?;
    for file in &files {
        let patch = read(file).with_context(|| format!("kubelet drop-in file {}", file.display()))?;
        merge_patch(&mut merged, patch);
    }
    let origin = format!("drop-ins of {}", dir.display());
    *cfg = from_yaml_str(&merged.to_string(), &origin)?;
    cfg.set_defaults();
    Ok(())
}

/// `filepath.WalkDir`'s order: entries sorted by name, a directory's content right after it; symbolic links are
/// not followed into directories.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "conf") {
            out.push(path);
        }
    }
    Ok(())
}

/// One drop-in as a JSON value, with its `apiVersion` and `kind` checked.
fn read(file: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file)?;
    if text.trim().is_empty() {
        bail!("file is empty");
    }
    let value: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).context("json")?
    } else {
        serde_saphyr::from_str(&text).context("yaml")?
    };
    let (version, kind) = (value.get("apiVersion").and_then(Value::as_str), value.get("kind").and_then(Value::as_str));
    match (version, kind) {
        (Some(API_VERSION), Some(KIND)) => Ok(value),
        (None, _) | (_, None) => bail!("no apiVersion/kind"),
        (Some(v), Some(k)) => bail!("unknown apiVersion/kind: {v}, Kind={k}"),
    }
}

/// RFC 7386 JSON merge patch, as `jsonpatch.MergePatch`.
fn merge_patch(target: &mut Value, patch: Value) {
    let Value::Object(fields) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let map = target.as_object_mut().expect("made an object");
    for (key, value) in fields {
        if value.is_null() {
            map.remove(&key);
        } else {
            merge_patch(map.entry(key).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn base() -> KubeletConfiguration {
        let mut cfg = from_yaml_str(&format!("{HEAD}maxPods: 100\nfeatureGates:\n  A: true\n"), "base").unwrap();
        cfg.set_defaults();
        cfg.apply_default_eviction_hard();
        cfg
    }

    #[test]
    fn drop_ins_merge_in_lexical_order_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{HEAD}{body}")).unwrap();
        };
        write("20-pods.conf", "maxPods: 20\nevictionHard:\n  memory.available: 1Gi\n");
        write("10-pods.conf", "maxPods: 10\ncgroupDriver: systemd\n");
        write("30-nested/x.conf", "featureGates:\n  B: false\n");
        write("40-last.conf", "maxPods: 40\n");
        write("50-ignored.yaml", "maxPods: 50\n");
        let mut cfg = base();
        merge(&mut cfg, dir.path()).unwrap();
        assert_eq!(cfg.max_pods, 40, "the last file wins; only *.conf files count");
        assert_eq!(cfg.cgroup_driver, "systemd");
        assert_eq!(cfg.feature_gates.get("A"), Some(&true), "maps merge key by key");
        assert_eq!(cfg.feature_gates.get("B"), Some(&false), "subdirectories are walked");
        let hard = cfg.eviction_hard.as_ref().unwrap();
        assert_eq!(hard.get("memory.available").map(String::as_str), Some("1Gi"));
        assert_eq!(hard.get("nodefs.available").map(String::as_str), Some("10%"), "the defaults stay");
        assert_eq!(cfg.node_status_update_frequency, base().node_status_update_frequency, "defaults filled");

        write("60-bad.conf", "maxPods: many\n");
        let err = format!("{:#}", merge(&mut base(), dir.path()).unwrap_err());
        assert!(err.contains("field maxPods"), "{err}");
        std::fs::write(dir.path().join("60-bad.conf"), "maxPods: 1\n").unwrap();
        let err = format!("{:#}", merge(&mut base(), dir.path()).unwrap_err());
        assert!(err.contains("60-bad.conf") && err.contains("no apiVersion/kind"), "{err}");
        assert!(merge(&mut base(), &dir.path().join("missing")).is_err());
    }
}
