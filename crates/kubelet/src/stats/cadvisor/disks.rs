//! The node's block devices as cAdvisor's `fs` package reports them on the root container: each block device
//! mounted on the node (a `/dev/...` source in `/proc/self/mountinfo`), its filesystem's size and inodes
//! (`statfs` of where it is mounted) and its `/proc/diskstats` counters.

use std::collections::BTreeMap;
use std::path::Path;

use super::render::DeviceFigures;
use crate::stats::host::{self, HostPaths, read};

/// The mounted block devices: (source, `major:minor`, mount point), one per source, the first mount of each.
fn block_mounts(mountinfo: &str) -> Vec<(String, String, String)> {
    let mut by_source: BTreeMap<String, (String, String)> = BTreeMap::new();
    for line in mountinfo.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else { continue };
        let (Some(dev), Some(point), Some(source)) = (f.get(2), f.get(4), f.get(sep + 2)) else { continue };
        if !source.starts_with("/dev/") || dev.starts_with("0:") {
            continue;
        }
        by_source.entry(source.to_string()).or_insert_with(|| (dev.to_string(), point.replace("\\040", " ")));
    }
    by_source.into_iter().map(|(s, (d, p))| (s, d, p)).collect()
}

/// `/proc/diskstats` by `major:minor`: its first 11 counters.
fn diskstats(text: &str) -> BTreeMap<String, [u64; 11]> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let mut counters = [0u64; 11];
            for (i, v) in f.get(3..14)?.iter().enumerate() {
                counters[i] = v.parse().ok()?;
            }
            Some((format!("{}:{}", f.first()?, f.get(1)?), counters))
        })
        .collect()
}

/// The block devices' figures.
pub fn devices(paths: &HostPaths) -> Vec<DeviceFigures> {
    let Some(mountinfo) = read(&paths.proc.join("self/mountinfo")) else { return vec![] };
    let stats = read(&paths.proc.join("diskstats")).map(|s| diskstats(&s)).unwrap_or_default();
    block_mounts(&mountinfo)
        .into_iter()
        .map(|(device, dev, point)| {
            let (limit, _, usage, inodes, inodes_free) = host::statfs(Path::new(&point)).unwrap_or_default();
            let diskstats = stats.get(&dev).copied().unwrap_or_default();
            DeviceFigures { device, limit, usage, inodes, inodes_free, diskstats }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_devices_are_found_once_with_their_counters() {
        let mountinfo = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                         23 22 0:21 / /proc rw - proc proc rw\n\
                         24 22 254:0 /var/lib/x /var/lib/x rw - ext4 /dev/vda rw\n\
                         25 22 0:30 / /dev/shm rw - tmpfs tmpfs rw\n\
                         26 22 8:1 / /mnt/data\\040disk rw shared:1 - xfs /dev/sdb1 rw\n";
        assert_eq!(
            block_mounts(mountinfo),
            [
                ("/dev/sdb1".to_string(), "8:1".to_string(), "/mnt/data disk".to_string()),
                ("/dev/vda".to_string(), "254:0".to_string(), "/".to_string()),
            ]
        );
        let d = diskstats(
            " 254       0 vda 439127 82733 178724282 306 4224252 1674711 821883808 5389 0 669 6047 0 0 0 0\n",
        );
        assert_eq!(d["254:0"], [439127, 82733, 178724282, 306, 4224252, 1674711, 821883808, 5389, 0, 669, 6047]);
    }
}
