//! Sets of CPU ids as upstream writes and reads them (`k8s.io/utils/cpuset`): `0-1,3` (runs of consecutive ids,
//! two included, as `a-b`; ascending; no spaces; the empty set as `""`). Used by the configuration's
//! `reservedSystemCPUs` and the CPU manager's state file.

use std::collections::BTreeSet;

/// A set of CPU ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(pub BTreeSet<u32>);

/// The ranges of `s` (`cpuset.Parse`'s grammar), with upstream's errors.
pub fn parse_ranges(s: &str) -> Result<Vec<(u64, u64)>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let atoi = |v: &str| v.parse::<u64>().map_err(|_| format!("strconv.Atoi: parsing {v:?}: invalid syntax"));
    s.split(',')
        .map(|range| match range.split_once('-') {
            None => atoi(range).map(|cpu| (cpu, cpu)),
            Some((start, end)) => {
                let (start, end) = (atoi(start)?, atoi(end)?);
                if start > end { Err(format!("invalid range {range:?} ({start} > {end})")) } else { Ok((start, end)) }
            }
        })
        .collect()
}

impl CpuSet {
    /// `cpuset.Parse`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut set = BTreeSet::new();
        for (a, b) in parse_ranges(s)? {
            let (a, b) = (u32::try_from(a).map_err(|e| e.to_string())?, u32::try_from(b).map_err(|e| e.to_string())?);
            set.extend(a..=b);
        }
        Ok(Self(set))
    }

    /// The set of `ids`.
    pub fn of(ids: impl IntoIterator<Item = u32>) -> Self {
        Self(ids.into_iter().collect())
    }

    /// The CPUs, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// How many CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `cpu` is in it.
    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    /// `self \ other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset_of(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }
}

impl std::fmt::Display for CpuSet {
    /// `CPUSet.String()`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = vec![];
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end = it.next().unwrap_or(end);
            }
            parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_print_and_parse_as_upstreams_cpuset() {
        for (ids, text) in
            [(vec![], ""), (vec![0, 1, 3], "0-1,3"), (vec![1, 5], "1,5"), (vec![0, 2, 3, 4, 6, 7], "0,2-4,6-7")]
        {
            assert_eq!(CpuSet::of(ids.clone()).to_string(), text);
            assert_eq!(CpuSet::parse(text).unwrap(), CpuSet::of(ids));
        }
        assert_eq!(CpuSet::parse("1.3").unwrap_err(), "strconv.Atoi: parsing \"1.3\": invalid syntax");
        assert_eq!(CpuSet::parse("3-1").unwrap_err(), "invalid range \"3-1\" (3 > 1)");
        assert_eq!(CpuSet::parse("0-3").unwrap().difference(&CpuSet::of([1])).to_string(), "0,2-3");
    }
}
