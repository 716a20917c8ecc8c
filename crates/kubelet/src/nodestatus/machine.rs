//! Facts of the machine for the Node object (the Go kubelet gets them from cAdvisor's `MachineInfo` and
//! `pkg/kubelet/nodestatus/setters.go`): CPU count, memory, root filesystem size, hugepages, machine ID, system
//! UUID, boot ID, kernel, OS image. Read once at start by [`read_machine_info`]; unit tests build
//! [`MachineInfo`] by hand.

use std::path::Path;

/// What the node status needs of the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineInfo {
    /// Logical CPUs.
    pub num_cores: u64,
    /// Memory in bytes.
    pub memory_capacity: u64,
    /// Size in bytes of the filesystem holding the kubelet's root directory.
    pub rootfs_capacity: u64,
    /// Hugepages: (page size in bytes, total pages).
    pub hugepages: Vec<(u64, u64)>,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// The system UUID (DMI product_uuid).
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// Kernel release (`uname -r`).
    pub kernel_version: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    /// Swap in bytes (`SwapTotal` of /proc/meminfo).
    pub swap_capacity: u64,
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Total memory in bytes (`MemTotal` of /proc/meminfo; 0 when unreadable).
pub fn memory_capacity() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Reads the machine's facts; `root_dir` is the kubelet's root directory (for the root filesystem size).
pub fn read_machine_info(root_dir: &Path) -> MachineInfo {
    let num_cores = std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1);
    let memory_capacity = memory_capacity();
    let rootfs_capacity = nix::sys::statvfs::statvfs(root_dir).map(|s| s.blocks() * s.fragment_size()).unwrap_or(0);
    let mut hugepages = vec![];
    if let Ok(rd) = std::fs::read_dir("/sys/kernel/mm/hugepages") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(kb) =
                name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("kB")).and_then(|s| s.parse::<u64>().ok())
            {
                let n = read_trim(&format!("{}/nr_hugepages", e.path().display())).parse().unwrap_or(0);
                hugepages.push((kb * 1024, n));
            }
        }
    }
    hugepages.sort();
    let os_image = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string())))
        .unwrap_or_else(|| "Linux".into());
    let kernel_version =
        nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let mut system_uuid = read_trim("/sys/class/dmi/id/product_uuid");
    if system_uuid.is_empty() {
        system_uuid = read_trim("/sys/devices/virtual/dmi/id/product_uuid");
    }
    MachineInfo {
        swap_capacity: kubelet_runtime::swap::swap_capacity(Path::new("/proc")).max(0) as u64,
        num_cores,
        memory_capacity,
        rootfs_capacity,
        hugepages,
        machine_id: read_trim("/etc/machine-id"),
        system_uuid,
        boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
        kernel_version,
        os_image,
    }
}

/// The architecture as Go names it (`runtime.GOARCH`).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}
