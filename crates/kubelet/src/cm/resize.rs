//! A pod cgroup's CPU and memory read and written for an in-place resize (`pod_container_manager_linux.go`
//! GetPodCgroupConfig, SetPodCgroupConfig; `cgroup_manager_linux.go` GetCgroupConfig, SetCgroupConfig), for both
//! drivers: the folders of the pod cgroup are given (one per v1 hierarchy, or the one v2 folder). Called by the
//! runtime manager's resize, from a pod worker; errors are returned, never logged away, so the resize stops.

use std::path::{Path, PathBuf};

use kubelet_runtime::resize::PodCgroupConfig;

/// `CpuSharesToCpuWeight`.
pub fn shares_to_weight(shares: i64) -> i64 {
    1 + ((shares - 2) * 9999) / 262142
}

/// `CpuWeightToCpuShares`.
pub fn weight_to_shares(weight: i64) -> i64 {
    2 + ((weight - 1) * 262142) / 9999
}

fn hierarchy_has(dir: &Path, controller: &str) -> bool {
    // `<mount>/<hierarchy>/<pod path>`: the hierarchy is named after its controllers (`cpu,cpuacct`).
    dir.ancestors().any(|a| a.file_name().is_some_and(|n| n.to_string_lossy().split(',').any(|c| c == controller)))
}

fn pick(dirs: &[PathBuf], v2: bool, controller: &str) -> Option<PathBuf> {
    if v2 {
        return dirs.first().cloned();
    }
    dirs.iter().find(|d| hierarchy_has(d, controller)).cloned()
}

fn read(dir: &Path, file: &str) -> std::io::Result<String> {
    std::fs::read_to_string(dir.join(file)).map(|s| s.trim().to_string())
}

fn number(dir: &Path, file: &str) -> std::io::Result<i64> {
    let s = read(dir, file)?;
    if s == "max" {
        return Ok(i64::MAX);
    }
    s.parse::<i64>().map_err(|e| std::io::Error::other(format!("{}: {s:?}: {e}", dir.join(file).display())))
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| std::io::Error::new(e.kind(), format!("write {value:?} to {}: {e}", dir.join(file).display())))
}

/// The CPU and memory settings of the pod cgroup in `dirs`.
pub fn read_config(dirs: &[PathBuf], v2: bool) -> std::io::Result<PodCgroupConfig> {
    let missing = || std::io::Error::new(std::io::ErrorKind::NotFound, "the pod cgroup does not exist");
    let cpu = pick(dirs, v2, "cpu").ok_or_else(missing)?;
    let memory = pick(dirs, v2, "memory").ok_or_else(missing)?;
    if v2 {
        let max = read(&cpu, "cpu.max")?;
        let mut parts = max.split_whitespace();
        let quota = match parts.next() {
            Some("max") | None => -1,
            Some(q) => q.parse().unwrap_or(-1),
        };
        let period = parts.next().and_then(|p| p.parse().ok()).unwrap_or(100_000);
        return Ok(PodCgroupConfig {
            cpu_shares: Some(weight_to_shares(number(&cpu, "cpu.weight")?)),
            cpu_quota: Some(quota),
            cpu_period: Some(period),
            memory: Some(number(&memory, "memory.max")?),
        });
    }
    // v1 reports no limit as a page-rounded huge number.
    let limit = number(&memory, "memory.limit_in_bytes")?;
    Ok(PodCgroupConfig {
        cpu_shares: Some(number(&cpu, "cpu.shares")?),
        cpu_quota: Some(number(&cpu, "cpu.cfs_quota_us")?),
        cpu_period: Some(number(&cpu, "cpu.cfs_period_us")?),
        memory: Some(if limit >= i64::MAX - 4096 * 2 { i64::MAX } else { limit }),
    })
}

/// Writes the settings of `c` that are set into the pod cgroup in `dirs`.
pub fn write_config(dirs: &[PathBuf], v2: bool, c: &PodCgroupConfig) -> std::io::Result<()> {
    let missing = || std::io::Error::new(std::io::ErrorKind::NotFound, "the pod cgroup does not exist");
    if c.cpu_shares.is_some() || c.cpu_quota.is_some() {
        let cpu = pick(dirs, v2, "cpu").ok_or_else(missing)?;
        if let Some(shares) = c.cpu_shares {
            if v2 {
                write(&cpu, "cpu.weight", &shares_to_weight(shares).to_string())?;
            } else {
                write(&cpu, "cpu.shares", &shares.to_string())?;
            }
        }
        if let Some(quota) = c.cpu_quota {
            let period = c.cpu_period.unwrap_or(100_000);
            if v2 {
                let q = if quota <= 0 { "max".to_string() } else { quota.to_string() };
                write(&cpu, "cpu.max", &format!("{q} {period}"))?;
            } else {
                write(&cpu, "cpu.cfs_period_us", &period.to_string())?;
                write(&cpu, "cpu.cfs_quota_us", &quota.to_string())?;
            }
        }
    }
    if let Some(m) = c.memory {
        let memory = pick(dirs, v2, "memory").ok_or_else(missing)?;
        let value = if m == i64::MAX { if v2 { "max".to_string() } else { "-1".to_string() } } else { m.to_string() };
        write(&memory, if v2 { "memory.max" } else { "memory.limit_in_bytes" }, &value)?;
    }
    Ok(())
}

/// The pod cgroup's memory usage.
pub fn memory_usage(dirs: &[PathBuf], v2: bool) -> std::io::Result<u64> {
    let memory = pick(dirs, v2, "memory")
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the pod cgroup does not exist"))?;
    let file = if v2 { "memory.current" } else { "memory.usage_in_bytes" };
    Ok(number(&memory, file)?.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v1_files_round_trip_with_upstreams_weight_conversion() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = dir.path().join("pod");
        std::fs::create_dir_all(&v2).unwrap();
        for (f, v) in
            [("cpu.max", "max 100000"), ("cpu.weight", "40"), ("memory.max", "max"), ("memory.current", "4096")]
        {
            std::fs::write(v2.join(f), v).unwrap();
        }
        let dirs = vec![v2.clone()];
        let c = read_config(&dirs, true).unwrap();
        assert_eq!(
            c,
            PodCgroupConfig {
                cpu_shares: Some(1024),
                cpu_quota: Some(-1),
                cpu_period: Some(100_000),
                memory: Some(i64::MAX)
            }
        );
        let grown = PodCgroupConfig {
            cpu_shares: Some(2048),
            cpu_quota: Some(150_000),
            cpu_period: Some(100_000),
            memory: Some(256 << 20),
        };
        write_config(&dirs, true, &grown).unwrap();
        assert_eq!(std::fs::read_to_string(v2.join("cpu.max")).unwrap(), "150000 100000");
        assert_eq!(std::fs::read_to_string(v2.join("cpu.weight")).unwrap(), "79");
        assert_eq!(std::fs::read_to_string(v2.join("memory.max")).unwrap(), "268435456");
        assert_eq!(memory_usage(&dirs, true).unwrap(), 4096);

        let cpu = dir.path().join("cpu,cpuacct/kubepods/pod1");
        let mem = dir.path().join("memory/kubepods/pod1");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        for (d, f, v) in [
            (&cpu, "cpu.shares", "512"),
            (&cpu, "cpu.cfs_quota_us", "-1"),
            (&cpu, "cpu.cfs_period_us", "100000"),
            (&mem, "memory.limit_in_bytes", "9223372036854771712"),
        ] {
            std::fs::write(d.join(f), v).unwrap();
        }
        let dirs = vec![cpu.clone(), mem.clone()];
        let c = read_config(&dirs, false).unwrap();
        assert_eq!((c.cpu_shares, c.cpu_quota, c.memory), (Some(512), Some(-1), Some(i64::MAX)));
        write_config(&dirs, false, &PodCgroupConfig { memory: Some(64 << 20), ..Default::default() }).unwrap();
        assert_eq!(std::fs::read_to_string(mem.join("memory.limit_in_bytes")).unwrap(), "67108864");
        assert_eq!(std::fs::read_to_string(cpu.join("cpu.shares")).unwrap(), "512", "only what is set is written");
        assert!(read_config(&[], false).is_err());
    }
}
