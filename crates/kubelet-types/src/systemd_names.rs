//! systemd slice names of the kubelet's cgroups (`pkg/kubelet/cm/cgroup_manager_linux.go` CgroupName.ToSystemd,
//! runc's `systemd.ExpandSlice`).
//!
//! The cgroup `[kubepods, burstable, pod<uid>]` is the unit `kubepods-burstable-pod<uid>.slice`, every `-` inside
//! a part written `_` (systemd reads `-` as nesting), and lives at
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` in the hierarchy. Pure
//! functions: the cgroup manager and the runtime (the sandbox's cgroup parent) call them.

/// The unit name of a cgroup given by its parts (`["kubepods", "besteffort"]` → `kubepods-besteffort.slice`).
pub fn slice_name(parts: &[&str]) -> String {
    let escaped: Vec<String> = parts.iter().filter(|p| !p.is_empty()).map(|p| p.replace('-', "_")).collect();
    if escaped.is_empty() {
        return "-.slice".into();
    }
    format!("{}.slice", escaped.join("-"))
}

/// The path of a slice in the hierarchy (`a-b.slice` → `/a.slice/a-b.slice`); `None` for a malformed name.
pub fn expand_slice(name: &str) -> Option<String> {
    let base = name.strip_suffix(".slice")?;
    if base == "-" {
        return Some("/".into());
    }
    if base.is_empty() || base.starts_with('-') || base.ends_with('-') || base.contains("--") || name.contains('/') {
        return None;
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for part in base.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
    }
    Some(path)
}

/// The parent unit of a slice (`a-b.slice` → `a.slice`, `a.slice` → `-.slice`).
pub fn parent_slice(name: &str) -> String {
    match name.strip_suffix(".slice").and_then(|b| b.rsplit_once('-')) {
        Some((parent, _)) if !parent.is_empty() => format!("{parent}.slice"),
        _ => "-.slice".into(),
    }
}

/// The pod UID of a pod slice's unit name (`kubepods-burstable-pod12_34.slice` → `12-34`).
pub fn pod_uid_of(unit: &str) -> Option<String> {
    let base = unit.strip_suffix(".slice")?;
    let last = base.rsplit('-').next()?;
    last.strip_prefix("pod").map(|u| u.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_are_upstream_s() {
        let uid = "8dbc5a4c-6ef9-4e1f-b52a-2b1b8c2f4d1a";
        let pod = format!("pod{uid}");
        let unit = slice_name(&["kubepods", "burstable", &pod]);
        assert_eq!(unit, "kubepods-burstable-pod8dbc5a4c_6ef9_4e1f_b52a_2b1b8c2f4d1a.slice");
        assert_eq!(
            expand_slice(&unit).unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbc5a4c_6ef9_4e1f_b52a_2b1b8c2f4d1a.slice"
        );
        assert_eq!(slice_name(&["kubepods", &pod]), "kubepods-pod8dbc5a4c_6ef9_4e1f_b52a_2b1b8c2f4d1a.slice");
        assert_eq!(slice_name(&["kubepods"]), "kubepods.slice");
        assert_eq!(slice_name(&[]), "-.slice");
        assert_eq!(expand_slice("-.slice").unwrap(), "/");
        assert_eq!(expand_slice("kubepods.slice").unwrap(), "/kubepods.slice");
        assert_eq!(expand_slice("a--b.slice"), None);
        assert_eq!(expand_slice("kubepods"), None);
        assert_eq!(parent_slice(&unit), "kubepods-burstable.slice");
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
        assert_eq!(pod_uid_of(&unit).as_deref(), Some(uid));
        assert_eq!(pod_uid_of("kubepods-burstable.slice"), None);
    }
}
