use super::*;

#[test]
fn image_names_are_completed_as_containerd_names_them() {
    assert_eq!(image_name("busybox"), "docker.io/library/busybox:latest");
    assert_eq!(image_name("busybox:1.36"), "docker.io/library/busybox:1.36");
    assert_eq!(image_name("prom/prometheus"), "docker.io/prom/prometheus:latest");
    assert_eq!(image_name("localhost/busybox:1"), "localhost/busybox:1");
    assert_eq!(image_name("registry.k8s.io/pause:3.10"), "registry.k8s.io/pause:3.10");
    assert_eq!(image_name("localhost:5000/app"), "localhost:5000/app:latest");
    assert_eq!(image_name("quay.io/a/b@sha256:abc"), "quay.io/a/b@sha256:abc");
    assert_eq!(image_name("sha256:abc"), "sha256:abc");
}

fn write(dir: &std::path::Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// A v2 tree with a pod (sandbox `sb1`, container `c1`) and an unknown child.
fn tree() -> (tempfile::TempDir, HostPaths) {
    let t = tempfile::tempdir().unwrap();
    let cg = t.path().join("cgroup");
    let proc = t.path().join("proc");
    write(
        &cg,
        &[
            ("cgroup.controllers", "cpu memory pids\n"),
            ("cpu.stat", "usage_usec 9000000\nuser_usec 6000000\nsystem_usec 3000000\n"),
            ("memory.stat", "anon 100\nfile 200\ninactive_file 50\n"),
            ("cgroup.procs", "1\n"),
        ],
    );
    let cpu = |usage: &str| {
        format!("usage_usec {usage}\nuser_usec 1\nsystem_usec 1\nnr_periods 4\nnr_throttled 1\nthrottled_usec 2\n")
    };
    let memory = [("memory.current", "4096\n"), ("memory.stat", "anon 1024\nfile 2048\ninactive_file 1000\n")];
    for dir in ["kubepods", "kubepods/besteffort", "kubepods/burstable", "kubepods/burstable/podu1"] {
        write(&cg.join(dir), &[("cpu.stat", &cpu("100")), ("cpu.max", "max 100000\n"), memory[0], memory[1]]);
    }
    write(
        &cg.join("kubepods/burstable/podu1/sb1"),
        &[("cpu.stat", &cpu("5")), ("cgroup.procs", "42\n"), memory[0], memory[1]],
    );
    write(
        &cg.join("kubepods/burstable/podu1/c1"),
        &[
            ("cpu.stat", &cpu("2500000")),
            ("cpu.max", "20000 100000\n"),
            ("memory.max", "67108864\n"),
            ("cgroup.procs", "43\n"),
            (
                "cpu.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
            ),
            memory[0],
            memory[1],
        ],
    );
    write(&cg.join("kubepods/burstable/podu1/stray"), &[("cpu.stat", &cpu("1")), memory[0], memory[1]]);
    write(&proc.join("42/net"), &[("dev", "h\nh\n  eth0: 1376 16 0 0 0 0 0 0 906 9 0 0 0 0 0 0\n")]);
    write(
        &proc.join("43"),
        &[("limits", "Max open files            20000                20000                files\n")],
    );
    std::fs::create_dir_all(proc.join("43/fd")).unwrap();
    std::os::unix::fs::symlink("socket:[1]", proc.join("43/fd/3")).unwrap();
    std::os::unix::fs::symlink("/dev/null", proc.join("43/fd/0")).unwrap();
    (t, HostPaths { proc, cgroup: cg })
}

fn known() -> Known {
    let mut k = Known { sandbox_image: "registry.k8s.io/pause:3.10".into(), ..Default::default() };
    k.sandboxes.insert("sb1".into(), ("web".into(), "default".into(), 1_700_000_000_000_000_000));
    k.pods.insert("u1".into(), ("web".into(), "default".into()));
    k.containers.insert(
        "c1".into(),
        (
            "app".into(),
            "web".into(),
            "default".into(),
            "docker.io/library/busybox:latest".into(),
            1_700_000_001_000_000_000,
        ),
    );
    k
}

fn lines<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} "))).collect()
}

/// The value of the series of `family` whose labels contain `labels`.
fn value(text: &str, family: &str, labels: &str) -> String {
    let l = lines(text, family)
        .into_iter()
        .find(|l| l.contains(labels))
        .unwrap_or_else(|| panic!("{family} {labels}:\n{text}"));
    let rest = l.rsplit_once('}').map_or_else(|| l.split_once(' ').unwrap().1, |(_, r)| r);
    rest.split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_scrape_reports_every_cgroup_with_upstreams_labels_names_and_units() {
    let (_t, paths) = tree();
    let text = collect(&paths, &kubelet_types::SystemClock, Some("/kubepods"), Some(&known()), true);
    let app = "container=\"app\",id=\"/kubepods/burstable/podu1/c1\",image=\"docker.io/library/busybox:latest\",name=\"c1\",namespace=\"default\",pod=\"web\"";
    assert_eq!(
        value(
            &text,
            "container_cpu_usage_seconds_total",
            &format!("{{{}", app.replacen(",id", ",cpu=\"total\",id", 1))
        ),
        "2.5"
    );
    assert_eq!(value(&text, "container_memory_working_set_bytes", app), "3096");
    assert_eq!(value(&text, "container_memory_rss", app), "1024");
    assert_eq!(value(&text, "container_memory_cache", app), "2048");
    assert_eq!(value(&text, "container_spec_memory_limit_bytes", app), "6.7108864e+07");
    assert_eq!(value(&text, "container_spec_cpu_quota", app), "20000");
    assert_eq!(value(&text, "container_cpu_cfs_throttled_periods_total", app), "1");
    assert_eq!(value(&text, "container_start_time_seconds", app), "1.700000001e+09");
    assert_eq!(value(&text, "container_file_descriptors", app), "2");
    assert_eq!(value(&text, "container_sockets", app), "1");
    assert_eq!(value(&text, "container_ulimits_soft", app), "20000");
    assert_eq!(value(&text, "container_pressure_cpu_waiting_seconds_total", app), "2");
    assert_eq!(value(&text, "container_pressure_cpu_stalled_seconds_total", app), "1");
    assert!(
        !lines(&text, "container_network_receive_bytes_total").iter().any(|l| l.contains("name=\"c1\"")),
        "a container shares its sandbox's network"
    );

    let sandbox = "container=\"\",id=\"/kubepods/burstable/podu1/sb1\",image=\"registry.k8s.io/pause:3.10\",interface=\"eth0\",name=\"sb1\",namespace=\"default\",pod=\"web\"";
    assert_eq!(value(&text, "container_network_receive_bytes_total", sandbox), "1376");
    assert_eq!(value(&text, "container_network_transmit_packets_total", sandbox), "9");
    let pod = "container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",name=\"\",namespace=\"default\",pod=\"web\"";
    assert_eq!(value(&text, "container_memory_usage_bytes", pod), "4096");
    assert!(lines(&text, "container_spec_cpu_quota").iter().all(|l| !l.contains(pod)), "no quota, no quota series");
    assert!(lines(&text, "container_cpu_cfs_periods_total").iter().all(|l| !l.contains(pod)));
    assert!(lines(&text, "container_ulimits_soft").iter().all(|l| !l.contains(pod)), "a pod cgroup has no process");
    let stray = "container=\"\",id=\"/kubepods/burstable/podu1/stray\",image=\"\",name=\"stray\",namespace=\"default\",pod=\"web\"";
    assert!(text.contains(stray), "a child the runtime does not know is still reported");
    for id in ["\"/\"", "\"/kubepods\"", "\"/kubepods/besteffort\"", "\"/kubepods/burstable\""] {
        assert!(
            lines(&text, "container_cpu_usage_seconds_total").iter().any(|l| l.contains(&format!("id={id}"))),
            "{id}"
        );
    }
    assert_eq!(value(&text, "container_cpu_user_seconds_total", "id=\"/\""), "6");
    assert_eq!(value(&text, "container_scrape_error", ""), "0");
    assert!(text.contains("# TYPE container_cpu_usage_seconds_total counter\n"));
    assert!(text.contains("# HELP container_memory_working_set_bytes Current working set in bytes.\n"));
    // Families sorted by name, as client_golang writes them.
    let names: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"machine_cpu_cores") && names.contains(&"cadvisor_version_info"));

    // Without KubeletPSI, no pressure families.
    let text = collect(&paths, &kubelet_types::SystemClock, Some("/kubepods"), Some(&known()), false);
    assert!(!text.contains("container_pressure_"));
    // The runtime could not be listed: the error, and no container series.
    let text = collect(&paths, &kubelet_types::SystemClock, Some("/kubepods"), None, true);
    assert_eq!(value(&text, "container_scrape_error", ""), "1");
    assert!(!text.contains("container_cpu_usage_seconds_total"));
}
