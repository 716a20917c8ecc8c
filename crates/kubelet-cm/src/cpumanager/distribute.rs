//! `distribute-cpus-across-numa` (`cpu_assignment.go` takeByTopologyNUMADistributed): a request that needs more than
//! one NUMA node is spread evenly over the fewest nodes that can hold it, in groups of `group_size` CPUs (whole cores
//! with `full-pcpus-only`), the combination and the remainder's nodes chosen to leave the free CPUs of all nodes the
//! most balanced (lowest standard deviation); each node's share is taken packed. Pure.

use std::collections::BTreeMap;

use kubelet_types::cpuset::CpuSet;

use super::policy::take_by_topology;
use super::topology::Topology;

fn std_dev(xs: &[usize]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mean = xs.iter().sum::<usize>() as f64 / xs.len() as f64;
    (xs.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt()
}

/// Every `k`-combination of `items`, in order; `f` returns false to stop.
fn combinations(items: &[u32], k: usize, f: &mut dyn FnMut(&[u32]) -> bool) {
    fn go(items: &[u32], k: usize, start: usize, acc: &mut Vec<u32>, f: &mut dyn FnMut(&[u32]) -> bool) -> bool {
        if k == 0 {
            return f(acc);
        }
        for i in start..=items.len().saturating_sub(k) {
            if i >= items.len() {
                break;
            }
            acc.push(items[i]);
            let go_on = go(items, k - 1, i + 1, acc, f);
            acc.pop();
            if !go_on {
                return false;
            }
        }
        true
    }
    if k >= 1 {
        go(items, k, 0, &mut vec![], f);
    }
}

/// `takeByTopologyNUMADistributed`.
pub fn take_distributed(topo: &Topology, available: &CpuSet, n: usize, group: usize) -> Result<CpuSet, String> {
    let group = group.max(1);
    if !n.is_multiple_of(group) || n == 0 {
        return take_by_topology(topo, available, n);
    }
    if n > available.len() {
        return Err(format!(
            "not enough cpus available to satisfy request: requested={n}, available={}",
            available.len()
        ));
    }
    let in_numa = |avail: &CpuSet, numa: u32| {
        CpuSet::of(avail.iter().filter(|c| topo.cpus.get(c).is_some_and(|i| i.numa == numa)))
    };
    let free = |avail: &CpuSet, numa: u32| in_numa(avail, numa).len();
    // NUMA nodes with free CPUs, fewest free first (`sortAvailableNUMANodes`).
    let mut numas: Vec<u32> = topo.numa_nodes().into_iter().filter(|m| free(available, *m) > 0).collect();
    numas.sort_by_key(|m| (free(available, *m), *m));
    // `rangeNUMANodesNeededToSatisfy`.
    let all_numas = topo.numa_nodes().len().max(1);
    let groups_total = (topo.cpus.len() - 1) / group + 1;
    let groups_per_numa = (groups_total - 1) / all_numas + 1;
    let groups_needed = (n - 1) / group + 1;
    let min_numas = (groups_needed - 1) / groups_per_numa + 1;
    let max_numas = groups_needed.min(numas.len());
    for k in min_numas..=max_numas {
        let mut best: Option<(f64, Vec<u32>, Vec<u32>)> = None;
        combinations(&numas, k, &mut |combo| {
            if best.as_ref().is_some_and(|b| b.0 == 0.0) {
                return false;
            }
            let cpus: usize = combo.iter().map(|m| free(available, *m)).sum();
            if cpus < n || combo.iter().map(|m| free(available, *m) / group).sum::<usize>() * group < n {
                return true;
            }
            let share = (n / combo.len() / group) * group;
            if combo.iter().any(|m| free(available, *m) < share) {
                return true;
            }
            let mut after: BTreeMap<u32, usize> = numas.iter().map(|m| (*m, free(available, *m))).collect();
            for m in combo {
                *after.get_mut(m).unwrap() -= share;
            }
            let remainder = n - share * combo.len();
            let candidates: Vec<u32> = combo.iter().copied().filter(|m| after[m] >= group).collect();
            let mut local: Option<(f64, Vec<u32>)> = None;
            if remainder == 0 {
                local = Some((std_dev(&after.values().copied().collect::<Vec<_>>()), vec![]));
            }
            let mut size = candidates.len();
            while remainder > 0 && size >= 1 {
                combinations(&candidates, size, &mut |subset| {
                    let mut rest = after.clone();
                    if subset.iter().map(|m| rest[m]).sum::<usize>() < remainder {
                        return true;
                    }
                    let mut left = remainder;
                    while left > 0 {
                        let mut progressed = false;
                        for m in subset {
                            if left == 0 {
                                break;
                            }
                            if rest[m] < group {
                                continue;
                            }
                            *rest.get_mut(m).unwrap() -= group;
                            left -= group;
                            progressed = true;
                        }
                        if !progressed {
                            return true;
                        }
                    }
                    let balance = std_dev(&rest.values().copied().collect::<Vec<_>>());
                    if local.as_ref().is_none_or(|l| balance < l.0) {
                        local = Some((balance, subset.to_vec()));
                    }
                    true
                });
                size -= 1;
            }
            if let Some((balance, rem)) = local
                && best.as_ref().is_none_or(|b| balance < b.0)
            {
                best = Some((balance, rem, combo.to_vec()));
            }
            true
        });
        let Some((_, remainder_numas, combo)) = best else { continue };
        let share = (n / combo.len() / group) * group;
        let mut left = available.clone();
        let mut result = CpuSet::default();
        for m in &combo {
            let cpus = take_by_topology(topo, &in_numa(&left, *m), share)?;
            left = left.difference(&cpus);
            result = result.union(&cpus);
        }
        let mut remainder = n - share * combo.len();
        while remainder > 0 {
            let before = remainder;
            for m in &remainder_numas {
                if remainder == 0 {
                    break;
                }
                if free(&left, *m) < group {
                    continue;
                }
                let cpus = take_by_topology(topo, &in_numa(&left, *m), group)?;
                left = left.difference(&cpus);
                result = result.union(&cpus);
                remainder -= group;
            }
            if remainder == before {
                return Err(format!("accounting error, not enough CPUs allocated, remaining: {remainder}"));
            }
        }
        return Ok(result);
    }
    take_by_topology(topo, available, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_over_two_numa_nodes_is_split_evenly() {
        // Two NUMA nodes of 4 single-thread cores.
        let topo = Topology::from_rows(&(0..8).map(|c| (c, c, c / 4, c / 4)).collect::<Vec<_>>());
        let all = topo.all();
        let got = take_distributed(&topo, &all, 6, 1).unwrap();
        let per_numa = |m: u32| got.iter().filter(|c| topo.cpus[c].numa == m).count();
        assert_eq!((per_numa(0), per_numa(1)), (3, 3), "{got}");
        // What fits one node stays packed on one node.
        let got = take_distributed(&topo, &all, 4, 1).unwrap();
        assert!(got.iter().all(|c| topo.cpus[&c].numa == topo.cpus[&got.iter().next().unwrap()].numa), "{got}");
        // With node 0 half used, 6 CPUs: the remainder goes where it keeps the nodes balanced.
        let used = CpuSet::parse("0-1").unwrap();
        let got = take_distributed(&topo, &all.difference(&used), 6, 1).unwrap();
        assert_eq!(got.len(), 6);
        assert!(take_distributed(&topo, &all, 9, 1).is_err());
    }
}
