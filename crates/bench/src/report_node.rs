//! The whole node's figures in the report: budgets, JSON and the Markdown section (see [`crate::wholenode`]).

use std::time::Duration;

use serde_json::{Value, json};

use crate::wholenode::{Batch, Cpu, Steady, WholeNodeResults};

/// CRI calls per minute at `pods` steady pods (upstream's kubelet: 205 at 100 pods).
pub const CRI_CALLS_PER_MINUTE: f64 = 210.0;
/// Mean relist time at `pods` pods.
pub const RELIST: Duration = Duration::from_millis(5);
/// SIGTERM → exit.
pub const SIGTERM_EXIT: Duration = Duration::from_millis(500);
/// What one machine-wide CPU window differs from another by with nothing changed (kernel threads, interrupts,
/// the clock tick's 10 ms granularity over the window), allowed above the floor.
pub const CPU_NOISE_MILLICORES: f64 = 5.0;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The machine's CPU at steady pods may be at most rkubelet's own plus the floor's (no kubelet), plus noise; the
/// control plane, which a real node does not run, is left out of both.
pub fn machine_budget_met(r: &WholeNodeResults) -> bool {
    r.steady.cpu.node() <= r.steady.cpu.group("rkubelet") + r.floor.node() + CPU_NOISE_MILLICORES
}

/// Adds the budgets.
pub fn budgets(r: &WholeNodeResults, add: &mut dyn FnMut(String, String, &'static str, bool)) {
    let s = &r.steady;
    add(
        format!("CRI calls per minute at {} steady pods", s.pods),
        format!("{:.0}", s.cri_total()),
        "≤ 210",
        s.cri_total() <= CRI_CALLS_PER_MINUTE,
    );
    add(
        format!("node CPU at {} steady pods (machine without the control plane)", s.pods),
        format!(
            "{:.0} mcores (rkubelet {:.1} + floor {:.0} = {:.0})",
            s.cpu.node(),
            s.cpu.group("rkubelet"),
            r.floor.node(),
            s.cpu.group("rkubelet") + r.floor.node()
        ),
        "≤ rkubelet + floor (+5 mcores noise)",
        machine_budget_met(r),
    );
    add(
        format!("PLEG relist at {} pods, mean (rkubelet's metric)", s.pods),
        format!("{:.2} ms", ms(s.relist_mean)),
        "≤ 5 ms",
        s.relist_mean <= RELIST,
    );
    add(
        format!("SIGTERM → exit with {} pods", s.pods),
        format!("{:.0} ms", ms(r.sigterm_exit)),
        "≤ 500 ms",
        r.sigterm_exit <= SIGTERM_EXIT,
    );
    add(
        "sandboxes left after every pod was deleted and rkubelet stopped".into(),
        r.sandboxes_left.to_string(),
        "0",
        r.sandboxes_left == 0,
    );
}

fn cpu_json(c: &Cpu) -> Value {
    json!({"machine_millicores": c.machine, "node_millicores": c.node(), "groups_millicores": c.groups})
}

fn steady_json(s: &Steady) -> Value {
    json!({
        "pods": s.pods, "cpu": cpu_json(&s.cpu), "cri_calls_per_minute": s.cri_per_minute,
        "cri_calls_per_minute_total": s.cri_total(), "relist_mean_ms": ms(s.relist_mean), "rss_bytes": s.rss,
    })
}

fn batch_json(b: &Batch) -> Value {
    json!({
        "pods": b.pods, "all_running_ms": ms(b.all_running), "all_gone_ms": ms(b.all_gone),
        "cri_floor_start_ms": ms(b.floor_start), "cri_floor_teardown_ms": ms(b.floor_teardown),
        "start_calls": b.start_calls, "teardown_calls": b.teardown_calls,
        "start_node_cpu_seconds": b.start_node_cpu, "cri_floor_start_node_cpu_seconds": b.floor_start_node_cpu,
    })
}

/// JSON.
pub fn json(r: &WholeNodeResults) -> Value {
    json!({
        "batch": batch_json(&r.batch), "all": batch_json(&r.teardown),
        "steady_batch": steady_json(&r.steady_batch), "steady": steady_json(&r.steady),
        "floor": cpu_json(&r.floor), "cause_stats": cpu_json(&r.cause_stats), "cause_status": cpu_json(&r.cause_status),
        "sigterm_exit_ms": ms(r.sigterm_exit), "sandboxes_left": r.sandboxes_left,
        "container_exit_to_apiserver_ms": r.exit_latency.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        "cadvisor_scrapes": {
            "pods": r.steady.pods, "scrapes": r.cadvisor.n, "bytes": r.cadvisor.bytes, "mean_ms": ms(r.cadvisor.mean),
            "node_cpu_ms_per_scrape": r.cadvisor.cost_ms(&r.steady.cpu, None),
            "kubelet_cpu_ms_per_scrape": r.cadvisor.cost_ms(&r.steady.cpu, Some("rkubelet")),
        },
    })
}

fn cpu_cells(c: &Cpu) -> String {
    format!(
        "{:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0}",
        c.group("rkubelet"),
        c.group("containerd"),
        c.group("shims"),
        c.node(),
        c.group("control plane"),
        c.machine
    )
}

fn calls_cell(s: &Steady) -> String {
    let by: Vec<String> = s.cri_per_minute.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
    format!("{:.0} ({})", s.cri_total(), by.join(", "))
}

/// The Markdown section.
pub fn markdown(r: &WholeNodeResults) -> String {
    let mut s = String::from(
        "\n## The whole node: rkubelet on containerd with the real control plane\n\n\
         The real kube-apiserver, kube-controller-manager and etcd (`crates/test-cluster`) on the same machine; pods \
         created and deleted with `kubectl`, seen Running and gone on a `kubectl get pods -w`. CPU in millicores over \
         the window, from `/proc`: rkubelet, containerd, the `containerd-shim-runc-v2` processes, the node (the \
         machine's busy time from `/proc/stat` without the control plane, which a real node does not run), the \
         control plane (apiserver, etcd, controller-manager, kubectl) and the machine. CRI calls from rkubelet's \
         `kubelet_runtime_operations_total`, the relist from its `kubelet_pleg_relist_duration_seconds`. The floor: \
         the same pods with rkubelet stopped (nobody asks containerd anything); then, still without a kubelet, the \
         two causes of the runtime's cost found in earlier rkubelet versions, each alone: the benchmark calling \
         `ListPodSandboxStats` every 10 s (stats sampled through CRI), and inspecting every pod twice a minute \
         (a `GetPodStatus` per pod per resync).\n\n\
         | window | rkubelet | containerd | shims | node | control plane | machine | CRI calls per minute | relist (mean) |\n\
         |---|---:|---:|---:|---:|---:|---:|---|---:|\n",
    );
    for st in [&r.steady_batch, &r.steady] {
        s.push_str(&format!(
            "| {} pods, rkubelet | {} | {} | {:.2} ms |\n",
            st.pods,
            cpu_cells(&st.cpu),
            calls_cell(st),
            ms(st.relist_mean)
        ));
    }
    s.push_str(&format!("| {} pods, no kubelet (floor) | {} | - | - |\n", r.steady.pods, cpu_cells(&r.floor)));
    s.push_str(&format!(
        "| {} pods, no kubelet, the benchmark calling ListPodSandboxStats every 10 s | {} | 6 | - |\n",
        r.steady.pods,
        cpu_cells(&r.cause_stats)
    ));
    s.push_str(&format!(
        "| {} pods, no kubelet, the benchmark inspecting each pod twice a minute | {} | {} | - |\n",
        r.steady.pods,
        cpu_cells(&r.cause_status),
        r.steady.pods * 8
    ));
    s.push_str(
        "\nPods started and torn down at once against the raw CRI floor (the benchmark's own RunPodSandbox + \
         CreateContainer + StartContainer, and StopPodSandbox + RemovePodSandbox, all at once, no kubelet). rkubelet's \
         pods are created, and deleted, by one kubectl per 10 pods, all at once (kubectl's client lets 10 requests \
         go at once, then 5 a second); the time runs from the first create to the last pod seen Running, or gone, \
         on the apiserver's watch, so it includes the apiserver's work. Node CPU-s: CPU-seconds the machine spent \
         without the control plane while the pods started, against the same for the floor:\n\n\
         | pods | all Running | CRI floor | ratio | node CPU-s (floor) | CRI calls | all gone | CRI floor | ratio | CRI calls |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for b in [&r.batch, &r.teardown] {
        let ratio = |a: Duration, f: Duration| if f.is_zero() { 0.0 } else { a.as_secs_f64() / f.as_secs_f64() };
        s.push_str(&format!(
            "| {} | {:.0} ms | {:.0} ms | {:.2} | {:.2} ({:.2}) | {} | {:.0} ms | {:.0} ms | {:.2} | {} |\n",
            b.pods,
            ms(b.all_running),
            ms(b.floor_start),
            ratio(b.all_running, b.floor_start),
            b.start_node_cpu,
            b.floor_start_node_cpu,
            b.start_calls,
            ms(b.all_gone),
            ms(b.floor_teardown),
            ratio(b.all_gone, b.floor_teardown),
            b.teardown_calls
        ));
    }
    s.push_str(&format!(
        "\nSIGTERM → exit with {} pods running: {:.0} ms. Sandboxes of the deleted pods left in containerd after \
         rkubelet stopped: {}.\n",
        r.steady.pods,
        ms(r.sigterm_exit),
        r.sandboxes_left
    ));
    if !r.exit_latency.is_empty() {
        s.push_str(&format!(
            "\nA container killed at {} steady pods (`StopContainer` with no grace period, one pod after another, {} \
             times) until its exit shows on the apiserver's watch: median {:.0} ms, 90th percentile {:.0} ms, \
             longest {:.0} ms.\n",
            r.steady.pods,
            r.exit_latency.len(),
            ms(r.exit_quantile(0.5)),
            ms(r.exit_quantile(0.9)),
            ms(r.exit_quantile(1.0))
        ));
    }
    s
}

/// rkubelet on container events against rkubelet relisting every second (`EventedPLEG: false`), in the same run.
pub fn markdown_relist(relist: &WholeNodeResults, r: &WholeNodeResults) -> String {
    let mut s = String::from(
        "\n### Container events against the 1 s relist\n\nThe same scenario in the same run with rkubelet relisting \
         every second as upstream's generic PLEG (`featureGates: {EventedPLEG: false}`) and with its relist woken \
         by containerd's container events (the default where the runtime streams them):\n\n\
         | figure | events | 1 s relist | ratio |\n|---|---:|---:|---:|\n",
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}", a / b) } else { "-".into() };
    let mut rows: Vec<(String, f64, f64, &str)> = vec![];
    for (ours, theirs) in [(&r.steady_batch, &relist.steady_batch), (&r.steady, &relist.steady)] {
        let pods = ours.pods;
        rows.extend([
            (format!("CRI calls per minute, {pods} pods"), ours.cri_total(), theirs.cri_total(), ""),
            (format!("rkubelet CPU, {pods} pods"), ours.cpu.group("rkubelet"), theirs.cpu.group("rkubelet"), " mcores"),
            (
                format!("containerd + shims CPU, {pods} pods"),
                ours.cpu.group("containerd") + ours.cpu.group("shims"),
                theirs.cpu.group("containerd") + theirs.cpu.group("shims"),
                " mcores",
            ),
        ]);
    }
    for (what, q) in [("median", 0.5), ("90th percentile", 0.9), ("longest", 1.0)] {
        rows.push((
            format!("container exit → apiserver, {what}"),
            ms(r.exit_quantile(q)),
            ms(relist.exit_quantile(q)),
            " ms",
        ));
    }
    for (figure, ours, theirs, unit) in rows {
        s.push_str(&format!("| {figure} | {ours:.1}{unit} | {theirs:.1}{unit} | {} |\n", ratio(ours, theirs)));
    }
    s
}

/// A table of the figures before (the `whole_node` JSON of an earlier run, with another binary) and after.
pub fn markdown_compare(before: &Value, label: &str, r: &WholeNodeResults) -> String {
    let b = |path: &str| before.pointer(path).and_then(Value::as_f64);
    let g = |group: &str| b(&format!("/steady/cpu/groups_millicores/{group}")).unwrap_or(0.0);
    let cell = |v: Option<f64>, unit: &str| v.map(|v| format!("{v:.1}{unit}")).unwrap_or_else(|| "-".into());
    let per_pod = |calls: Option<f64>, pods: Option<f64>| match (calls, pods) {
        (Some(c), Some(p)) if p > 0.0 => Some(c / p),
        _ => None,
    };
    let a = &r.steady;
    let mut rows: Vec<(String, String, String)> = vec![
        (
            format!("rkubelet CPU, {} steady pods", a.pods),
            cell(Some(g("rkubelet")), " mcores"),
            format!("{:.1} mcores", a.cpu.group("rkubelet")),
        ),
        (
            "containerd CPU".into(),
            cell(Some(g("containerd")), " mcores"),
            format!("{:.1} mcores", a.cpu.group("containerd")),
        ),
        ("the shims' CPU".into(), cell(Some(g("shims")), " mcores"), format!("{:.1} mcores", a.cpu.group("shims"))),
        (
            "node CPU (machine without the control plane)".into(),
            cell(b("/steady/cpu/node_millicores"), " mcores"),
            format!("{:.1} mcores", a.cpu.node()),
        ),
        (
            "node CPU with no kubelet (floor, same run)".into(),
            cell(b("/floor/node_millicores"), " mcores"),
            format!("{:.1} mcores", r.floor.node()),
        ),
        (
            "machine CPU".into(),
            cell(b("/steady/cpu/machine_millicores"), " mcores"),
            format!("{:.1} mcores", a.cpu.machine),
        ),
        (
            "CRI calls per minute".into(),
            cell(b("/steady/cri_calls_per_minute_total"), ""),
            format!("{:.1}", a.cri_total()),
        ),
        ("PLEG relist, mean".into(), cell(b("/steady/relist_mean_ms"), " ms"), format!("{:.2} ms", ms(a.relist_mean))),
    ];
    for (label, key, run) in [
        (format!("batch of {}", r.batch.pods), "batch", &r.batch),
        (format!("{} pods", r.teardown.pods), "all", &r.teardown),
    ] {
        let was = |field: &str| b(&format!("/{key}/{field}"));
        let per_pod_now = |calls: u64| format!("{:.1}", calls as f64 / run.pods.max(1) as f64);
        rows.extend([
            (
                format!("{label}: all Running (CRI floor)"),
                format!("{} ({})", cell(was("all_running_ms"), " ms"), cell(was("cri_floor_start_ms"), " ms")),
                format!("{:.0} ms ({:.0} ms)", ms(run.all_running), ms(run.floor_start)),
            ),
            (
                format!("{label}: CRI calls per pod to start"),
                cell(per_pod(was("start_calls"), was("pods")), ""),
                per_pod_now(run.start_calls),
            ),
            (
                format!("{label}: all gone (CRI floor)"),
                format!("{} ({})", cell(was("all_gone_ms"), " ms"), cell(was("cri_floor_teardown_ms"), " ms")),
                format!("{:.0} ms ({:.0} ms)", ms(run.all_gone), ms(run.floor_teardown)),
            ),
            (
                format!("{label}: CRI calls per pod to tear down"),
                cell(per_pod(was("teardown_calls"), was("pods")), ""),
                per_pod_now(run.teardown_calls),
            ),
        ]);
    }
    rows.extend([
        ("SIGTERM → exit".into(), cell(b("/sigterm_exit_ms"), " ms"), format!("{:.0} ms", ms(r.sigterm_exit))),
        ("sandboxes left".into(), cell(b("/sandboxes_left"), ""), r.sandboxes_left.to_string()),
    ]);
    let mut s = format!(
        "\n### Before and after\n\nThe same scenario on the same machine with {label} (before) and this commit (after):\n\n\
         | figure | before | after |\n|---|---:|---:|\n"
    );
    for (figure, before, after) in rows {
        s.push_str(&format!("| {figure} | {before} | {after} |\n"));
    }
    s
}

/// rkubelet against the upstream kubelet in the same run (same runtime, pods and machine): the figures side by
/// side and their ratio (rkubelet / upstream; below 1 is rkubelet spending less).
pub fn markdown_upstream(up: &WholeNodeResults, r: &WholeNodeResults) -> String {
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}", a / b) } else { "-".into() };
    let mut rows: Vec<(String, f64, f64, &str)> = Vec::new();
    for (what, ours, theirs) in [("batch", &r.steady_batch, &up.steady_batch), ("steady", &r.steady, &up.steady)] {
        let pods = ours.pods;
        rows.extend([
            (
                format!("kubelet CPU, {pods} pods ({what})"),
                ours.cpu.group("rkubelet"),
                theirs.cpu.group("rkubelet"),
                " mcores",
            ),
            (format!("kubelet RSS, {pods} pods"), ours.rss as f64 / 1048576.0, theirs.rss as f64 / 1048576.0, " MiB"),
            (
                format!("containerd + shims CPU, {pods} pods"),
                ours.cpu.group("containerd") + ours.cpu.group("shims"),
                theirs.cpu.group("containerd") + theirs.cpu.group("shims"),
                " mcores",
            ),
            (
                format!("node CPU (machine without the control plane), {pods} pods"),
                ours.cpu.node(),
                theirs.cpu.node(),
                " mcores",
            ),
            (format!("CRI calls per minute, {pods} pods"), ours.cri_total(), theirs.cri_total(), ""),
        ]);
    }
    for (ours, theirs) in [(&r.batch, &up.batch), (&r.teardown, &up.teardown)] {
        let n = ours.pods;
        let per_pod = |c: u64, b: &Batch| c as f64 / b.pods.max(1) as f64;
        rows.extend([
            (format!("{n} pods at once: all Running"), ms(ours.all_running), ms(theirs.all_running), " ms"),
            (format!("{n} pods at once: all gone"), ms(ours.all_gone), ms(theirs.all_gone), " ms"),
            (format!("{n} pods: node CPU-s to start"), ours.start_node_cpu, theirs.start_node_cpu, " s"),
            (
                format!("{n} pods: CRI calls per pod to start"),
                per_pod(ours.start_calls, ours),
                per_pod(theirs.start_calls, theirs),
                "",
            ),
            (
                format!("{n} pods: CRI calls per pod to tear down"),
                per_pod(ours.teardown_calls, ours),
                per_pod(theirs.teardown_calls, theirs),
                "",
            ),
        ]);
    }
    for (what, q) in [("median", 0.5), ("longest", 1.0)] {
        rows.push((
            format!("container exit → apiserver, {what}"),
            ms(r.exit_quantile(q)),
            ms(up.exit_quantile(q)),
            " ms",
        ));
    }
    rows.push(("SIGTERM → exit".into(), ms(r.sigterm_exit), ms(up.sigterm_exit), " ms"));
    let n = r.steady.pods;
    rows.extend([
        (
            format!("/metrics/cadvisor at {n} pods: node CPU per scrape"),
            r.cadvisor.cost_ms(&r.steady.cpu, None),
            up.cadvisor.cost_ms(&up.steady.cpu, None),
            " ms",
        ),
        (
            format!("/metrics/cadvisor at {n} pods: kubelet CPU per scrape"),
            r.cadvisor.cost_ms(&r.steady.cpu, Some("rkubelet")),
            up.cadvisor.cost_ms(&up.steady.cpu, Some("rkubelet")),
            " ms",
        ),
        (
            format!("/metrics/cadvisor at {n} pods: response"),
            r.cadvisor.bytes as f64 / 1024.0,
            up.cadvisor.bytes as f64 / 1024.0,
            " KiB",
        ),
        (format!("/metrics/cadvisor at {n} pods: latency"), ms(r.cadvisor.mean), ms(up.cadvisor.mean), " ms"),
    ]);
    let mut s = String::from(
        "\n### rkubelet and the upstream kubelet\n\nThe same scenario, runtime, pods and machine, in the same run, \
         with the upstream kubelet v1.35 (`../shared/k8s/bin/kubelet`, the same configuration file and flags). \
         Ratio: rkubelet / upstream (below 1: rkubelet spends less):\n\n\
         | figure | rkubelet | upstream kubelet | ratio |\n|---|---:|---:|---:|\n",
    );
    for (figure, ours, theirs, unit) in rows {
        s.push_str(&format!("| {figure} | {ours:.1}{unit} | {theirs:.1}{unit} | {} |\n", ratio(ours, theirs)));
    }
    s
}
