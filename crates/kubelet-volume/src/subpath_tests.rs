use super::*;
use std::os::unix::fs::symlink;

fn volume() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let vol = t.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    (t, vol)
}

#[test]
fn a_symlink_anywhere_on_the_way_is_refused_wherever_it_points() {
    let (t, vol) = volume();
    std::fs::create_dir_all(vol.join("a/b")).unwrap();
    assert!(safe_open(&vol.join("a/b"), &vol).is_ok());
    // Inside the volume or out of it, a link is refused.
    symlink(vol.join("a"), vol.join("inside")).unwrap();
    symlink("/", vol.join("root")).unwrap();
    for p in ["inside/b", "root", "root/etc"] {
        let e = safe_open(&vol.join(p), &vol).unwrap_err();
        assert!(e.0.contains("cannot open") || e.0.contains("unexpected symlink"), "{p}: {e}");
    }
    assert!(safe_open(&t.path().join("elsewhere"), &vol).unwrap_err().0.contains("outside of allowed base"));
}

#[test]
fn subpath_directories_are_made_with_the_volumes_mode_and_never_outside() {
    let (t, vol) = volume();
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let perm = volume_mode(&vol).unwrap();
    assert_eq!(perm, 0o2775);
    safe_make_dir(Path::new("x/y/z"), &vol, perm).unwrap();
    for d in ["x", "x/y", "x/y/z"] {
        let m = std::fs::metadata(vol.join(d)).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o2775, "{d}: the volume's mode, not the umask's");
    }
    // An intermediate link out of the volume: nothing is made outside.
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    symlink(&outside, vol.join("out")).unwrap();
    let e = safe_make_dir(Path::new("out/new"), &vol, perm).unwrap_err();
    assert!(e.0.contains("outside of allowed base"), "{e}");
    assert!(!outside.join("new").exists());
    // A link inside the volume to a directory inside it is followed, as upstream.
    symlink(vol.join("x"), vol.join("alias")).unwrap();
    safe_make_dir(Path::new("alias/w"), &vol, perm).unwrap();
    assert!(vol.join("x/w").is_dir());
    // An existing file is not a directory.
    std::fs::write(vol.join("f"), b"").unwrap();
    assert!(safe_make_dir(Path::new("f"), &vol, perm).unwrap_err().0.contains("not a directory"));
}

#[test]
fn a_subpath_is_bind_mounted_reused_and_cleaned_without_touching_the_volume() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: bind mounts need root");
        return;
    }
    let (t, vol) = volume();
    std::fs::create_dir(vol.join("data")).unwrap();
    std::fs::write(vol.join("data/inside"), b"x").unwrap();
    let pod_dir = t.path().join("pod");
    std::fs::create_dir(&pod_dir).unwrap();
    let sp = Subpath {
        volume_mount_index: 1,
        path: vol.join("data"),
        volume_name: "v",
        volume_path: vol.clone(),
        pod_dir: pod_dir.clone(),
        container_name: "app",
    };
    let target = prepare_safe_subpath(&sp).unwrap();
    assert_eq!(target, pod_dir.join("volume-subpaths/v/app/1"));
    assert!(target.join("inside").exists(), "the subPath's content through the bind");
    let table = mountinfo::read().unwrap();
    assert!(mountinfo::is_mount_point(&table, &target));
    // Again: the same bind is reused, not stacked.
    assert_eq!(prepare_safe_subpath(&sp).unwrap(), target);
    let binds = mountinfo::read().unwrap().iter().filter(|m| m.mount_point == target).count();
    assert_eq!(binds, 1);
    // A link to / where the subPath was: refused, and the old bind does not hide that.
    std::fs::rename(vol.join("data"), vol.join("data.real")).unwrap();
    symlink("/", vol.join("data")).unwrap();
    let e = prepare_safe_subpath(&sp).unwrap_err();
    assert!(e.0.contains("not within volume path"), "{e}");
    clean_subpaths(&pod_dir).unwrap();
    assert!(!pod_dir.join("volume-subpaths").exists());
    assert!(!mountinfo::read().unwrap().iter().any(|m| m.mount_point.starts_with(&pod_dir)));
    assert!(vol.join("data.real/inside").exists(), "cleaning removes nothing of the volume");
    clean_subpaths(&pod_dir).unwrap();
}

#[test]
fn subpath_names_must_be_relative_without_backsteps() {
    assert!(is_relative_without_backsteps("a/b"));
    assert!(is_relative_without_backsteps("a/./b"));
    assert!(!is_relative_without_backsteps("/a"));
    assert!(!is_relative_without_backsteps("a/../b"));
    assert!(!is_relative_without_backsteps(".."));
}
