use super::*;

#[global_allocator]
static ALLOC: heap::SamplingAlloc = heap::SamplingAlloc;

/// The bytes a profile gives the stacks through `function`, per sample type.
fn through(p: &proto::Profile, function: &str) -> Vec<i64> {
    let mut sums = vec![0; p.sample_type.len()];
    for s in &p.sample {
        if p.stack(s).iter().any(|f| f.contains(function)) {
            for (i, v) in s.value.iter().enumerate() {
                sums[i] += v;
            }
        }
    }
    sums
}

#[inline(never)]
fn hold_sixty_four_mebibytes() -> Vec<Vec<u8>> {
    (0..64).map(|i| vec![i as u8; 1 << 20]).collect()
}

#[test]
fn the_heap_profile_counts_what_a_function_holds_and_what_it_freed() {
    let held = std::hint::black_box(hold_sixty_four_mebibytes());
    let p = proto::decode(&heap::profile(false)).unwrap();
    let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (p.str(t.r#type), p.str(t.unit))).collect();
    assert_eq!(
        types,
        [("alloc_objects", "count"), ("alloc_space", "bytes"), ("inuse_objects", "count"), ("inuse_space", "bytes")]
    );
    assert_eq!(p.period, 512 * 1024);
    let v = through(&p, "hold_sixty_four_mebibytes");
    // 64 blocks of 1 MiB, each sampled with probability 1 - e^-2 and scaled back: within 25% (over 5 sigma).
    let mib = |b: i64| b as f64 / (1 << 20) as f64;
    assert!((48.0..80.0).contains(&mib(v[3])), "in use: {} MiB", mib(v[3]));
    assert!((48.0..80.0).contains(&mib(v[1])), "allocated: {} MiB", mib(v[1]));
    drop(held);
    let p = proto::decode(&heap::profile(true)).unwrap();
    assert_eq!(p.str(p.default_sample_type), "alloc_space", "/debug/pprof/allocs shows allocations first");
    let v = through(&p, "hold_sixty_four_mebibytes");
    assert_eq!(v[3], 0, "nothing in use once freed");
    assert!((48.0..80.0).contains(&mib(v[1])), "still counted as allocated: {} MiB", mib(v[1]));
}

#[test]
fn sampled_blocks_survive_growing_and_shrinking() {
    // Large growth makes sampled blocks move (realloc of a sampled block) many times over.
    let mut v: Vec<u64> = Vec::new();
    for i in 0..2_000_000u64 {
        v.push(i);
    }
    assert_eq!(v.iter().sum::<u64>(), 2_000_000 * 1_999_999 / 2);
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10).collect::<Vec<_>>());
}

#[inline(never)]
fn spin_for_cpu(cpu: std::time::Duration) -> u64 {
    let t0 = thread_cpu();
    let mut x = 0u64;
    while thread_cpu() - t0 < cpu {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
    x
}

fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn a_cpu_profile_shows_where_the_cpu_went_and_only_one_runs_at_a_time() {
    let p = cpu::CpuProfile::start().unwrap();
    assert!(matches!(cpu::CpuProfile::start(), Err(ProfileError::CpuInUse)));
    // Half a second of this thread's CPU, however busy the machine is: about 50 samples at 100 Hz.
    std::hint::black_box(spin_for_cpu(std::time::Duration::from_millis(500)));
    let p = proto::decode(&p.finish()).unwrap();
    let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (p.str(t.r#type), p.str(t.unit))).collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    assert_eq!(p.period, 10_000_000);
    let v = through(&p, "spin_for_cpu");
    assert!(v[0] >= 20, "samples in spin_for_cpu: {}", v[0]);
    assert_eq!(v[1], v[0] * 10_000_000);
    let own_frames = p
        .sample
        .iter()
        .flat_map(|s| p.stack(s))
        .any(|f| f.contains("on_sigprof") || f.contains("trace_unsynchronized"));
    assert!(!own_frames, "the sampler's own frames are cut off");
    let leaf = |f: &str| p.sample.iter().any(|s| p.stack(s).first().is_some_and(|l| l.contains(f)));
    assert!(leaf("spin_for_cpu") || leaf("Range"), "a sample's leaf is the interrupted code");
    // Finished: a new one may start.
    cpu::CpuProfile::start().unwrap().finish();
}
