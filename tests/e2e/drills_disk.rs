//! Fault drill 5: the root dir's filesystem full. The node's `--root-dir` is a 64 MiB tmpfs; six pods of the drill
//! workload run, then a file not owned by any pod fills it to the last page (and keeps it full: what rkubelet frees
//! is taken again at once).
//!
//! 1. Without a nodefs threshold (no eviction can free what the filler holds): the running pods keep running, a
//!    deleted pod goes entirely, and the new pods (emptyDir and ConfigMap volumes, init containers, a sidecar) fail
//!    with upstream's events (FailedMount for the ConfigMap's contents, CreateContainerConfigError for the
//!    `etc-hosts` file) and are retried with back-off: no container is made, no sandbox beyond the one a pod
//!    needs, nothing left of the failed writes, rkubelet neither dies nor spins. Once the filler goes, every pod
//!    runs and the invariant holds.
//!    1b. No free inode either: a new pod gets FailedToMakePodDataDirectories and nothing else; a running pod's
//!    sidecar that stops is started again at once (without its termination-message file, as upstream) and the
//!    pod's `/etc/hosts` keeps its content.
//! 2. rkubelet restarted on the full disk with a soft `nodefs.available` threshold (its grace period longer than
//!    the drill): the pods it ran are admitted again and keep running, DiskPressure is reported on the Node with its
//!    event, a new pod is refused as upstream's admission refuses it, and the condition clears once the space is
//!    back.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::{TestEnv, condition};
use common::drill::{self, Baseline, Expect};
use common::*;
use kubelet_cri::RemoteRuntime;
use serde_json::Value;
use tokio::time::Instant;

/// The root dir's filesystem size.
const ROOT_SIZE: &str = "64m";
/// The workload's pods running before the disk fills: two of each kind.
const BEFORE: usize = 6;
/// How long the disk stays full while rkubelet's CPU and retries are watched.
const HOLD: Duration = Duration::from_secs(25);

/// The tmpfs mounted on the node's root dir before rkubelet starts; unmounted (lazily: pod volumes are mounted
/// below it) when dropped, also on a failed test. Declared before the node, so that it outlives it.
#[derive(Default)]
struct TmpfsRoot(Option<PathBuf>);

impl TmpfsRoot {
    fn mount(&mut self, root: &Path) {
        use nix::mount::{MsFlags, mount};
        std::fs::create_dir_all(root).unwrap();
        let data = format!("size={ROOT_SIZE},nr_inodes=16384,mode=0755");
        mount(Some("tmpfs"), root, Some("tmpfs"), MsFlags::empty(), Some(data.as_str()))
            .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", root.display()));
        self.0 = Some(root.to_path_buf());
    }
}

impl Drop for TmpfsRoot {
    fn drop(&mut self) {
        let Some(root) = self.0.take() else { return };
        if let Err(e) = nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("unmount {}: {e}", root.display());
        }
        // The node's folder was left by its TempDir while the mount was in the way.
        let _ = std::fs::remove_dir(&root);
        if let Some(parent) = root.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}

/// Keeps the node's log as `/tmp/drill-disk.log` when the test fails (its folder goes with the node). Declared
/// after the node, so that it is dropped first.
struct KeepLog(PathBuf);

impl Drop for KeepLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = std::fs::copy(&self.0, std::env::temp_dir().join("drill-disk.log"));
        }
    }
}

/// Fills the filesystem of `dir` up to the last page, appending to the file `dir/filler`; returns the bytes written.
fn fill(dir: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("filler")).unwrap();
    let mut written = 0u64;
    for chunk in [1 << 20, 4096] {
        let buf = vec![0xa5u8; chunk];
        loop {
            match f.write(&buf) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("fill {}: {e}", dir.display()),
            }
        }
    }
    written
}

/// Takes every free inode of the filesystem of `dir` with empty files in `dir/inodes`; returns how many.
fn fill_inodes(dir: &Path) -> u64 {
    let d = dir.join("inodes");
    if std::fs::create_dir(&d).is_err() && !d.is_dir() {
        return 0;
    }
    let mut n = 0;
    while std::fs::File::create_new(d.join(format!("{}", rand::random::<u64>()))).is_ok() {
        n += 1;
    }
    n
}

/// Whatever fills the disk keeps it full: what rkubelet frees (a deleted pod's folder, a failed write's files) is
/// taken again within 20 ms, until [`Filler::stop`]. With `inodes`, the free inodes are taken as well.
struct Filler {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl Filler {
    fn start(dir: &Path, inodes: bool) -> Filler {
        let fill_all = move |d: &Path| (fill(d), if inodes { fill_inodes(d) } else { 0 });
        let first = fill_all(dir);
        let st = nix::sys::statvfs::statvfs(dir).unwrap();
        assert_eq!(st.blocks_available(), 0, "the filesystem is full");
        assert!(!inodes || st.files_available() == 0, "no inode is free");
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (dir.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut total = first;
            while !s.load(Ordering::Relaxed) {
                let more = fill_all(&d);
                total = (total.0 + more.0, total.1 + more.1);
                std::thread::sleep(Duration::from_millis(20));
            }
            total
        });
        Filler { dir: dir.to_path_buf(), stop, thread: Some(thread) }
    }

    /// Stops filling and removes the filler: the space is back. Returns the bytes and inodes it took.
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let total = self.thread.take().unwrap().join().unwrap();
        std::fs::remove_file(self.dir.join("filler")).unwrap();
        let _ = std::fs::remove_dir_all(self.dir.join("inodes"));
        total
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The config of the drill's node: the harness's without its nodefs thresholds, so that nothing is evicted for what
/// the filler holds (phase 1), plus `extra` (phase 2).
fn config(n: &Node, extra: &str) -> String {
    let hard = "evictionHard:\n  memory.available: 100Mi\n  imagefs.available: 1Gi\n";
    let text = std::fs::read_to_string(&n.config).unwrap();
    // The harness's config ends with its evictionHard block (and phase 2's with this function's additions).
    let base = text.split("evictionHard:").next().unwrap().to_string();
    format!("{base}{hard}evictionPressureTransitionPeriod: 10s\n{extra}")
}

/// Whether `text` names the full disk.
fn enospc(text: &str) -> bool {
    text.to_lowercase().contains("no space left on device")
}

/// The waiting reason and message of the first container of `pod` that waits with `reason`.
fn waiting<'a>(pod: &'a Value, reason: &str) -> Option<&'a str> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().into_iter().flatten())
        .find(|c| c["state"]["waiting"]["reason"] == reason)
        .and_then(|c| c["state"]["waiting"]["message"].as_str())
}

/// The CPU seconds a process used so far (user + system).
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap() as f64
}

/// (sandboxes, containers) the runtime holds for the pod `name` of the drill.
async fn runtime_objects(rt: &RemoteRuntime, name: &str) -> (usize, usize) {
    (sandboxes_of(rt, name).await.len(), containers_of(rt, name).await.len())
}

/// The timestamped directories of an API-backed volume of pod `uid` (one once its contents are written).
fn data_dirs(root: &Path, uid: &str, volume: &str) -> Vec<String> {
    let dir = root.join("pods").join(uid).join("volumes/kubernetes.io~configmap").join(volume);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("..") && n != "..data")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_root_dir_fails_new_pods_cleanly_keeps_the_rest_and_recovers() {
    let (_g, rt) = fresh_runtime().await;
    drill::note_preexisting_cgroups();
    let env = TestEnv::new().await;
    let mut tmpfs = TmpfsRoot::default();
    let mut node = env.start_node_with(
        &[],
        |n| {
            tmpfs.mount(&n.root);
            config(n, "")
        },
        vec![],
    );
    let _keep = KeepLog(node.log_path());
    env.wait_node_ready(&mut node).await;
    let root = node.root.clone();
    let mut yaml = drill::config_map_yaml();
    for i in 0..BEFORE {
        yaml.push_str("---\n");
        yaml.push_str(&drill::pod_yaml(&env, i));
    }
    env.kubectl(&["apply", "-f", env.write("workload.yaml", &yaml).to_str().unwrap()]).await;
    let names = drill::names(BEFORE);
    let want = Expect { running: &names, unchanged: None };
    let base = drill::wait_invariant("disk-start", &env, &mut node, &rt, want, Duration::from_secs(120)).await.state;

    // Phase 1: the disk full; a pod deleted goes entirely.
    let filler = Filler::start(&root, false);
    let t = Instant::now();
    env.kubectl(&["delete", "pod", "d-01", "--wait=false"]).await;
    let gone = root.join("pods").join(&base["d-01"].uid);
    node.wait_for("d-01 gone from the apiserver and its folder removed", Duration::from_secs(60), || async {
        (env.pod("d-01").await.is_none() && !gone.exists()).then_some(())
    })
    .await;
    let deleted = t.elapsed();
    // New pods.
    let new: Vec<String> = drill::names(BEFORE + 3)[BEFORE..].to_vec();
    for i in BEFORE..BEFORE + 3 {
        env.create(&drill::pod_yaml(&env, i)).await;
    }
    let t = Instant::now();
    // The ConfigMap volume's contents cannot be written: FailedMount. No sandbox is made for it.
    let failed_mount = node
        .wait_for("FailedMount naming the full disk for d-06", Duration::from_secs(60), || async {
            env.events().await.into_iter().find(|e| e.0 == new[0] && e.1 == "FailedMount" && enospc(&e.2))
        })
        .await;
    // The others get their sandbox, but their etc-hosts cannot be written: CreateContainerConfigError.
    let mut config_errors = vec![];
    for name in &new[1..] {
        let msg = node
            .wait_for(&format!("{name} waiting in CreateContainerConfigError"), Duration::from_secs(60), || async {
                let p = env.pod(name).await?;
                waiting(&p, "CreateContainerConfigError").filter(|m| enospc(m)).map(str::to_string)
            })
            .await;
        config_errors.push(msg);
    }
    let reported = t.elapsed();

    // While the disk stays full: rkubelet lives without spinning, retries with back-off, makes nothing it cannot
    // finish, and the running pods are untouched.
    let log_before = node.log().lines().filter(|l| enospc(l)).count();
    let cpu_before = cpu_seconds(node.pid());
    let hold = Instant::now();
    let mut worst = (0, 0);
    while hold.elapsed() < HOLD {
        node.assert_alive();
        assert_eq!(runtime_objects(&rt, &new[0]).await, (0, 0), "nothing made for a pod whose volumes wait");
        for name in &new[1..] {
            let (sandboxes, containers) = runtime_objects(&rt, name).await;
            assert!(sandboxes <= 1 && containers == 0, "{name}: {sandboxes} sandboxes, {containers} containers");
            worst = (worst.0.max(sandboxes), worst.1.max(containers));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let cpu = (cpu_seconds(node.pid()) - cpu_before) / HOLD.as_secs_f64();
    let log_lines = node.log().lines().filter(|l| enospc(l)).count() - log_before;
    let views = drill::apiserver_pods(&env).await;
    for (name, b) in base.iter().filter(|(n, _)| *n != "d-01") {
        let v = &views[name];
        assert_eq!(v["status"]["phase"], "Running", "{name} keeps running: {v}");
        assert_eq!(v["metadata"]["uid"], b.uid.as_str());
    }
    let seen = env.events().await;
    let retries = |reason: &str, name: &str| {
        seen.iter().filter(|e| e.0 == name && e.1 == reason && enospc(&e.2)).map(|e| e.3).sum::<i64>()
    };
    let mount_retries = retries("FailedMount", &new[0]);
    let config_retries: i64 = new[1..].iter().map(|n| retries("Failed", n)).sum();
    assert!(mount_retries >= 2 && config_retries >= 2, "retried: {mount_retries} mounts, {config_retries} starts");
    assert!(cpu < 0.2, "rkubelet used {:.0}% of a core while the disk was full", cpu * 100.0);
    assert!(log_lines < 40, "{log_lines} log lines naming the full disk in {HOLD:?}");

    // The space comes back.
    let (filled, _) = filler.stop();
    let t = Instant::now();
    let mut running: Vec<String> = names.iter().filter(|n| *n != "d-01").cloned().collect();
    running.extend(new.iter().cloned());
    let want = Expect { running: &running, unchanged: Some(&base) };
    let c = drill::wait_invariant("disk-full", &env, &mut node, &rt, want, Duration::from_secs(90)).await;
    let recovered = t.elapsed();
    let uid = &c.state[&new[0]].uid;
    let dirs = data_dirs(&root, uid, "conf");
    assert_eq!(dirs.len(), 1, "one timestamped directory in the ConfigMap volume after the failed writes: {dirs:?}");
    drill::report(format_args!(
        "drill disk-full: {filled} bytes of filler; a pod deleted gone in {:.1} s; new pods reported {:.1} s after \
         their creation: FailedMount {:?}; \
         CreateContainerConfigError {:?}; while full for {HOLD:?}: {mount_retries} FailedMount and {config_retries} \
         Failed events (back-off), at most {} sandbox and {} containers per new pod, rkubelet at {:.1}% of a core, \
         {log_lines} log lines naming the full disk; every pod Running {:.1} s after the space came back, {} restarts",
        deleted.as_secs_f64(),
        reported.as_secs_f64(),
        failed_mount.2,
        config_errors[0],
        worst.0,
        worst.1,
        cpu * 100.0,
        recovered.as_secs_f64(),
        c.restarts - drill::restarts(&base),
    ));
    assert_eq!(c.restarts, drill::restarts(&base), "no container restarted");

    // Phase 1b: no free inode either.
    let base = no_inodes(&env, &mut node, &rt, &root, &mut running, c.state).await;

    // Phase 2: the same disk full under a soft nodefs threshold whose grace period outlasts the drill.
    disk_pressure(&env, &mut node, &rt, &root, &running, &base).await;
    node.stop_and_clean(&rt).await;
}

/// Phase 1b: blocks and inodes taken. A new pod cannot have its folder (FailedToMakePodDataDirectories, nothing
/// made); a running pod's sidecar stopped behind rkubelet's back is started again at once, without its
/// termination-message file (as upstream), and the pod's `/etc/hosts` keeps its content. Returns the new baseline.
async fn no_inodes(
    env: &TestEnv,
    node: &mut Node,
    rt: &RemoteRuntime,
    root: &Path,
    running: &mut Vec<String>,
    mut base: Baseline,
) -> Baseline {
    use kubelet_cri::RuntimeService;
    let filler = Filler::start(root, true);
    let t = Instant::now();
    env.create(&drill::pod_yaml(env, 9)).await;
    let d02 = base["d-02"].clone();
    let side = &d02.containers["side"].0;
    rt.stop_container(side, 0).await.unwrap();
    let failed = node
        .wait_for("FailedToMakePodDataDirectories for d-09", Duration::from_secs(60), || async {
            env.events()
                .await
                .into_iter()
                .find(|e| e.0 == "d-09" && e.1 == "FailedToMakePodDataDirectories" && enospc(&e.2))
        })
        .await;
    node.wait_for("d-02's sidecar running again", Duration::from_secs(60), || async {
        let p = env.pod("d-02").await?;
        let c = p["status"]["initContainerStatuses"].as_array()?.iter().find(|c| c["name"] == "side")?.clone();
        (c["restartCount"] == 1 && c["state"]["running"].is_object() && c["ready"] == true).then_some(())
    })
    .await;
    let again = t.elapsed();
    assert_eq!(runtime_objects(rt, "d-09").await, (0, 0), "nothing made for a pod without its folder");
    let hosts = std::fs::read_to_string(root.join("pods").join(&d02.uid).join("etc-hosts")).unwrap();
    assert!(hosts.contains(&format!("{}\td-02", d02.ip)), "d-02's /etc/hosts keeps its content: {hosts:?}");
    assert!(node.log().contains("unable to create the termination-log file; the container runs without it"));
    let (_, taken) = filler.stop();
    let t = Instant::now();
    // The sidecar's dead instance stays in the runtime (for `kubectl logs --previous`), which the invariant counts
    // as unknown: d-02 goes, its removal after the episode checked by the invariant too.
    env.kubectl(&["delete", "pod", "d-02", "--wait=false"]).await;
    running.retain(|n| n != "d-02");
    running.push("d-09".into());
    base.remove("d-02");
    let want = Expect { running: running.as_slice(), unchanged: Some(&base) };
    drill::wait_invariant("no-inodes", env, node, rt, want, Duration::from_secs(60)).await;
    drill::report(format_args!(
        "drill no-inodes: {taken} inodes taken; a new pod reported {:?}; d-02's stopped sidecar running again \
         {:.1} s later without its termination-message file, its /etc/hosts intact; every pod Running (d-02 \
         deleted) {:.1} s after the inodes came back",
        failed.2,
        again.as_secs_f64(),
        t.elapsed().as_secs_f64()
    ));
    base
}

/// Phase 2: rkubelet restarted on the full disk with `nodefs.available` as a soft threshold; the pods it ran are
/// admitted again, the full disk is DiskPressure, a new pod is refused, nothing running changes, the condition
/// clears once the space is back.
async fn disk_pressure(
    env: &TestEnv,
    node: &mut Node,
    rt: &RemoteRuntime,
    root: &Path,
    running: &[String],
    base: &Baseline,
) {
    let soft = "evictionSoft:\n  nodefs.available: 16Mi\nevictionSoftGracePeriod:\n  nodefs.available: 10m\n";
    assert!(node.sigterm().success(), "rkubelet exits cleanly on SIGTERM");
    // The disk fills while rkubelet is down: it starts on a full root dir.
    let filler = Filler::start(root, false);
    std::fs::write(&node.config, config(node, soft)).unwrap();
    let t = Instant::now();
    node.spawn();
    node.wait_healthy().await;
    let pressure =
        |status: &'static str| move |n: &Value| (condition(n, "DiskPressure").as_deref() == Some(status)).then_some(());
    node.wait_for("DiskPressure=True on the Node", Duration::from_secs(60), || async {
        env.node_object().await.as_ref().and_then(pressure("True"))
    })
    .await;
    let reported = t.elapsed();
    let n = env.node_object().await.unwrap();
    let c = n["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "DiskPressure").unwrap();
    assert_eq!(c["reason"], "KubeletHasDiskPressure", "{c}");
    let selector = format!("involvedObject.name={},reason=NodeHasDiskPressure", env.node);
    node.wait_for("the NodeHasDiskPressure event", Duration::from_secs(30), || async {
        let out = kubectl(&env.admin, &["get", "events", "-A", "--field-selector", &selector, "-o", "name"]).await;
        (!out.trim().is_empty()).then_some(())
    })
    .await;
    // Admission refuses a new pod as upstream's eviction manager does.
    env.create(&drill::pod_yaml(env, 10)).await;
    let refused = node
        .wait_for("d-10 refused", Duration::from_secs(60), || async {
            env.pod("d-10").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(refused["status"]["reason"], "Evicted", "{refused}");
    assert_eq!(refused["status"]["message"], "Pod was rejected: The node had condition: [DiskPressure]. ", "{refused}");
    let log = node.log();
    assert!(log.contains("node pressure conditions changed conditions=[\"DiskPressure\"]"));
    let readmitted = log.matches("pod ran before this start: admitted under node pressure").count();
    assert_eq!(readmitted, running.len(), "the pods the node ran are admitted again");

    filler.stop();
    let t = Instant::now();
    node.wait_for("DiskPressure=False on the Node", Duration::from_secs(60), || async {
        env.node_object().await.as_ref().and_then(pressure("False"))
    })
    .await;
    let cleared = t.elapsed();
    env.kubectl(&["delete", "pod", "d-10", "--wait=false"]).await;
    let want = Expect { running, unchanged: Some(base) };
    let c = drill::wait_invariant("disk-pressure", env, node, rt, want, Duration::from_secs(60)).await;
    drill::report(format_args!(
        "drill disk-pressure: rkubelet started on the full disk: its {readmitted} pods admitted again, DiskPressure \
         on the Node {:.1} s after the start; a new pod refused ({}); nothing evicted or restarted ({} restarts); the \
         condition cleared {:.1} s after the space came back (evictionPressureTransitionPeriod 10s)",
        reported.as_secs_f64(),
        refused["status"]["message"],
        c.restarts - drill::restarts(base),
        cleared.as_secs_f64()
    ));
    assert_eq!(c.restarts, drill::restarts(base), "no container restarted");
}
