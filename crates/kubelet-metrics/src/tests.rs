use super::*;

fn parse_lines(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn histogram_renders_cumulative_buckets_sum_and_count() {
    let h = HistogramVec::new(
        Opts::alpha("kubelet_x_seconds", "Duration of x.", &["operation"]),
        vec![0.005, 0.25, 1.0, 2.5],
    );
    h.observe(&["sync"], 0.001);
    h.observe(&["sync"], 0.3);
    h.observe(&["sync"], 3.0);
    h.observe(&["create"], 1.0);
    let mut out = String::new();
    h.collect(&mut out);
    let expected = "\
# HELP kubelet_x_seconds [ALPHA] Duration of x.
# TYPE kubelet_x_seconds histogram
kubelet_x_seconds_bucket{operation=\"create\",le=\"0.005\"} 0
kubelet_x_seconds_bucket{operation=\"create\",le=\"0.25\"} 0
kubelet_x_seconds_bucket{operation=\"create\",le=\"1\"} 1
kubelet_x_seconds_bucket{operation=\"create\",le=\"2.5\"} 1
kubelet_x_seconds_bucket{operation=\"create\",le=\"+Inf\"} 1
kubelet_x_seconds_sum{operation=\"create\"} 1
kubelet_x_seconds_count{operation=\"create\"} 1
kubelet_x_seconds_bucket{operation=\"sync\",le=\"0.005\"} 1
kubelet_x_seconds_bucket{operation=\"sync\",le=\"0.25\"} 1
kubelet_x_seconds_bucket{operation=\"sync\",le=\"1\"} 2
kubelet_x_seconds_bucket{operation=\"sync\",le=\"2.5\"} 2
kubelet_x_seconds_bucket{operation=\"sync\",le=\"+Inf\"} 3
kubelet_x_seconds_sum{operation=\"sync\"} 3.301
kubelet_x_seconds_count{operation=\"sync\"} 3
";
    assert_eq!(out, expected);
}

#[test]
fn unlabelled_families_show_zero_and_labelled_ones_hide_until_used() {
    let r = Registry::new();
    let c = Arc::new(CounterVec::new(Opts::stable("a_total", "A.", &[])));
    let g = Arc::new(GaugeVec::new(Opts::beta("b", "B.", &["node"])));
    r.register(g.clone());
    r.register(c.clone());
    let text = r.gather();
    assert_eq!(text, "# HELP a_total [STABLE] A.\n# TYPE a_total counter\na_total 0\n");
    g.set(&["n1"], 2.0);
    c.add(&[], 1.5);
    c.add(&[], -1.0);
    assert_eq!(parse_lines(&r.gather()), vec![("a_total".to_string(), 1.5), ("b{node=\"n1\"}".to_string(), 2.0)]);
    g.remove(&["n1"]);
    assert!(!r.gather().contains("b{"));
}

#[test]
fn label_values_and_help_are_escaped() {
    let g = GaugeVec::new(Opts::alpha("e", "Line\\one\nand two.", &["v"]));
    g.set(&["a\"b\\c\nd"], 1.0);
    let mut out = String::new();
    g.collect(&mut out);
    assert!(out.contains("# HELP e [ALPHA] Line\\\\one\\nand two.\n"), "{out}");
    assert!(out.contains("e{v=\"a\\\"b\\\\c\\nd\"} 1\n"), "{out}");
}

#[test]
fn floats_render_as_prometheus_parsers_expect() {
    assert_eq!(format_float(1.0), "1");
    assert_eq!(format_float(0.005), "0.005");
    assert_eq!(format_float(2.5), "2.5");
    assert_eq!(format_float(f64::INFINITY), "+Inf");
    assert_eq!(format_float(1e-9), "1e-09");
    assert_eq!(format_float(3.2e22), "3.2e+22");
    assert_eq!(format_float(123456789.0), "1.23456789e+08");
    assert_eq!(format_float(1048576.0), "1.048576e+06");
    assert_eq!(format_float(123456.5), "123456.5");
    assert_eq!(format_float(0.0001), "0.0001");
    assert_eq!(format_float(0.00001), "1e-05");
    assert_eq!(format_float(-1.0), "-1");
    assert_eq!(format_float(745.0580596923828), "745.0580596923828");
}

#[test]
fn bucket_generators_match_client_golang() {
    assert_eq!(exponential_buckets(0.005, 2.0, 4), vec![0.005, 0.01, 0.02, 0.04]);
    assert_eq!(linear_buckets(1.0, 2.0, 3), vec![1.0, 3.0, 5.0]);
}

#[test]
#[should_panic(expected = "registered twice")]
fn duplicate_names_are_refused() {
    let r = Registry::new();
    r.register(Arc::new(GaugeVec::new(Opts::alpha("d", "D.", &[]))));
    r.register(Arc::new(GaugeVec::new(Opts::alpha("d", "D.", &[]))));
}
