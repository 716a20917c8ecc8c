//! The host's files: kernel log records (OOM kills), resolv.conf, and the `/proc` and cgroup (v1 and v2) files
//! the stats read, written into a scratch tree that the readers are pointed at.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kubelet::stats::host::{self as h, HostPaths};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

use crate::engine::run;
use crate::strategies::{TextEdit, any_text, digits, edit, text_edits, text_from};
use crate::{Options, Report};

const KMSG_FILL: &[&str] = &[
    "/",
    "/kubepods/burstable/pod1",
    "x",
    "(",
    ")",
    ",",
    "=",
    " ",
    ",pid=",
    ",uid=",
    ",task=",
    ",oom_memcg=",
    ",task_memcg=",
    ",nodemask=",
    "Killed process ",
    "Task in ",
    " killed as a result of limit of ",
    "123",
    "4294967296",
    "-1",
    "é",
];

/// One kernel log record, from a template with its holes filled.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    prefix: String,
    template: u8,
    fill: Vec<String>,
    edits: Vec<TextEdit>,
}

impl Record {
    fn text(&self) -> String {
        let f = |i: usize| self.fill.get(i).cloned().unwrap_or_default();
        let message = match self.template % 5 {
            0 => format!("{} invoked oom-killer: gfp_mask=0x0, order=0", f(0)),
            1 => format!(
                "oom-kill:constraint=CONSTRAINT_{},nodemask=(null),cpuset={},mems_allowed=0,oom_memcg={},task_memcg={},task={},pid={},uid={}",
                f(0),
                f(1),
                f(2),
                f(3),
                f(4),
                f(5),
                f(6)
            ),
            2 => format!("Killed process {} ({}) total-vm:1kB, anon-rss:0kB", f(0), f(1)),
            3 => format!("Task in {} killed as a result of limit of {}", f(0), f(1)),
            _ => f(0),
        };
        edit(format!("{}{message}", self.prefix), &self.edits)
    }
}

fn record() -> BoxedStrategy<Record> {
    let prefix = prop_oneof![
        4 => (0u32..8, any::<u64>(), any::<u64>()).prop_map(|(p, s, t)| format!("{p},{s},{t},-;")),
        1 => text_from(&["6", ",", ";", "-", "18446744073709551616", "c", " "]),
    ];
    let fill = proptest::collection::vec(prop_oneof![4 => text_from(KMSG_FILL), 1 => digits()], 0..8);
    (prefix, any::<u8>(), fill, text_edits())
        .prop_map(|(prefix, template, fill, edits)| Record { prefix, template, fill, edits })
        .boxed()
}

/// `/dev/kmsg` records through `parse_record` and the OOM parser, in sequence.
pub(crate) fn kmsg(o: &Options) -> Report {
    run(
        "kmsg-oom",
        o,
        proptest::collection::vec(record(), 1..8).prop_map(|rs| rs.iter().map(Record::text).collect::<Vec<_>>()),
        Arc::new(|records: &Vec<String>| {
            let mut parser = kubelet::oom::OomParser::default();
            for r in records {
                let Some(rec) = kubelet::oom::parse_record(r) else { continue };
                if let Some(kill) = parser.feed(&rec, None) {
                    let _ = kubelet::oom::system_oom_message(&kill);
                }
            }
            Ok(())
        }),
    )
}

/// resolv.conf: lines of keywords and arguments.
pub(crate) fn resolv_conf(o: &Options) -> Report {
    let arg = text_from(&["1.2.3.4", "::1", "a.b.", ".", "ndots:5", "ndots:", ":", "timeout:1", "x", "#", ";", "é"]);
    let line = (
        select(&["nameserver", "search", "options", "domain", "#", ";", " nameserver", "\tsearch"][..]),
        proptest::collection::vec(arg, 0..8),
    )
        .prop_map(|(k, args)| format!("{k} {}", args.join(" ")));
    let text = prop_oneof![
        4 => proptest::collection::vec(line, 0..12).prop_map(|l| l.join("\n")),
        1 => any_text(),
        1 => (1usize..3000).prop_map(|n| (0..n).map(|i| format!("options o{i}:1")).collect::<Vec<_>>().join("\n")),
    ];
    run(
        "resolv-conf",
        o,
        text,
        Arc::new(|s: &String| {
            let _ = kubelet_runtime::config_gen::parse_resolv_conf(s);
            Ok(())
        }),
    )
}

/// The files of the scratch tree a case writes.
const FILES: &[&str] = &[
    "cpu.stat",
    "memory.stat",
    "memory.current",
    "memory.max",
    "pids.current",
    "cgroup.procs",
    "cpuacct.usage",
    "memory.usage_in_bytes",
    "memory.limit_in_bytes",
];
const PROC_FILES: &[&str] =
    &["stat", "meminfo", "loadavg", "sys/kernel/pid_max", "sys/kernel/threads-max", "1/net/dev", "self-stat"];
const STAT_KEYS: &[&str] = &[
    "usage_usec",
    "anon",
    "file",
    "inactive_file",
    "pgfault",
    "pgmajfault",
    "total_inactive_file",
    "total_rss",
    "total_pgfault",
    "total_pgmajfault",
    "MemTotal",
    "btime",
    "cpu",
    "cpu0",
    "max",
];

/// Numbers of a kernel file: mostly in range, now and then out of it (the huge ones are rare: a case writes
/// dozens of files).
fn number() -> BoxedStrategy<String> {
    prop_oneof![
        20 => (0u64..100_000).prop_map(|n| n.to_string()),
        8 => any::<u64>().prop_map(|n| n.to_string()),
        4 => "[0-9]{1,40}",
        1 => (1usize..2000).prop_map(|n| "9".repeat(n)),
        1 => select(&["18446744073709551615", "18446744073709551616", "-1", "max", "", "1e3", "0x10"][..])
            .prop_map(str::to_string),
    ]
    .boxed()
}

/// Text like a kernel's statistics file: `key value` lines, numbers, separators and units.
fn stat_text() -> BoxedStrategy<String> {
    let line = (
        select(STAT_KEYS),
        select(&[" ", ": ", ":", "\t", "  "][..]),
        proptest::collection::vec(number(), 0..12),
        select(&["", " kB", "kB"][..]),
    )
        .prop_map(|(k, sep, vals, unit)| format!("{k}{sep}{}{unit}", vals.join(" ")));
    prop_oneof![
        5 => proptest::collection::vec(line, 0..8).prop_map(|l| l.join("\n")),
        2 => number(),
        1 => (number(), number(), number(), number()).prop_map(|(a, b, c, d)| format!("{a} {b} {c} {d}/{a} {b}")),
        1 => (text_from(&["eth0", "lo", "veth1", ":", " ", "|"]), proptest::collection::vec(number(), 0..18))
            .prop_map(|(n, v)| format!("Inter-|\n face |\n  {n}: {}\n", v.join(" "))),
        1 => (text_from(&["bash", ")", "(", " ", "é"]), proptest::collection::vec(number(), 0..30))
            .prop_map(|(n, v)| format!("1 ({n}) S {}", v.join(" "))),
        1 => any_text(),
    ]
    .boxed()
}

/// Contents of the scratch tree's files (`None`: absent).
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    cgroup: Vec<Option<String>>,
    proc: Vec<Option<String>>,
}

struct Scratch {
    _dir: tempfile::TempDir,
    v2: HostPaths,
    v1: HostPaths,
    /// Each cgroup folder (both versions, the root and two below) with the files of [`FILES`] it holds.
    cgroup_dirs: Vec<(PathBuf, &'static [usize])>,
}

fn write(path: &Path, content: &Option<String>) {
    match content {
        Some(c) => {
            let _ = std::fs::write(path, c);
        }
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn scratch() -> std::io::Result<Scratch> {
    let dir = tempfile::tempdir()?;
    let v2 = HostPaths { proc: dir.path().join("proc"), cgroup: dir.path().join("v2") };
    let v1 = HostPaths { proc: dir.path().join("proc"), cgroup: dir.path().join("v1") };
    std::fs::create_dir_all(v2.proc.join("sys/kernel"))?;
    std::fs::create_dir_all(v2.proc.join("1/net"))?;
    let mut cgroup_dirs: Vec<(PathBuf, &'static [usize])> = vec![];
    for d in CGROUPS.iter().map(|c| c.trim_start_matches('/')) {
        cgroup_dirs.push((v2.cgroup.join(d), &[0, 1, 2, 3, 4, 5]));
        cgroup_dirs.push((v1.cgroup.join("cpuacct").join(d), &[5, 6]));
        cgroup_dirs.push((v1.cgroup.join("memory").join(d), &[1, 7, 8]));
        cgroup_dirs.push((v1.cgroup.join("pids").join(d), &[4]));
    }
    for (d, _) in &cgroup_dirs {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(v2.cgroup.join("cgroup.controllers"), "cpu memory pids\n")?;
    Ok(Scratch { _dir: dir, v2, v1, cgroup_dirs })
}

/// The cgroups read.
const CGROUPS: &[&str] = &["/", "/kubepods", "/kubepods/burstable/pod1"];

/// The stats' readers of `/proc` and cgroup files (v1 and v2) on fuzzed file contents.
pub(crate) fn proc_files(o: &Options) -> Report {
    let scratch = match scratch() {
        Ok(s) => Arc::new(s),
        Err(e) => return crate::engine::setup_failure("proc-files", format!("setting up: {e}")),
    };
    let tree = (
        proptest::collection::vec(option::weighted(0.9, stat_text()), FILES.len()),
        proptest::collection::vec(option::weighted(0.9, stat_text()), PROC_FILES.len()),
    )
        .prop_map(|(cgroup, proc)| Tree { cgroup, proc });
    run(
        "proc-files",
        o,
        tree,
        Arc::new(move |t: &Tree| {
            let s = &scratch;
            for (dir, files) in &s.cgroup_dirs {
                for i in *files {
                    write(&dir.join(FILES[*i]), &t.cgroup[*i]);
                }
            }
            for (name, content) in PROC_FILES.iter().zip(&t.proc) {
                write(&s.v2.proc.join(name), content);
            }
            for paths in [&s.v2, &s.v1] {
                for cg in CGROUPS {
                    let _ = (h::cgroup_cpu(paths, cg), h::cgroup_memory(paths, cg), h::cgroup_pids(paths, cg));
                    let _ = h::cgroup_first_pid(paths, cg);
                }
                let _ = (h::node_cpu(paths), h::meminfo(paths, "MemTotal"), h::rlimit(paths), h::boot_time(paths));
                let _ = (h::net_dev(paths, "1"), h::pod_cgroups(paths, "/kubepods"));
            }
            for text in t.proc.iter().chain(&t.cgroup).flatten() {
                let _ = h::parse_net_dev(text);
                let _ = kubelet_metrics::process::parse_stat(text, 100.0, 4096.0, 1.7e9);
            }
            Ok(())
        }),
    )
}
