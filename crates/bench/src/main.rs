//! rkubelet's benchmark with budgets (issue: measured every time). This first part measures rkubelet alone, on the
//! in-memory CRI runtime: converging N pods (time and CPU), the PLEG relist cost at N pods, steady-state CPU and
//! memory. It writes a JSON result and a Markdown table, and with `--check` exits non-zero naming every budget
//! missed. `--smoke` is the small version CI runs so the program cannot rot.

mod core;
mod report;

use std::path::PathBuf;

use clap::Parser;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "rkubelet-bench")]
struct Args {
    /// Small, fast run (CI): 110 pods, short steady-state window.
    #[arg(long)]
    smoke: bool,
    /// Pod counts to converge.
    #[arg(long, value_delimiter = ',', default_value = "110,1000,5000")]
    pods: Vec<usize>,
    /// Seconds of steady state measured at 110 pods.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// Where the JSON result goes.
    #[arg(long, default_value = "target/benchmarks.json")]
    json: PathBuf,
    /// Where the Markdown table goes (e.g. docs/benchmarks.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Exit non-zero when a budget is missed.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.pods = vec![110];
        args.steady_seconds = 3;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let results = rt.block_on(core::run_all(&args.pods, args.steady_seconds))?;
    let report = report::Report::new(results, args.smoke);
    if let Some(dir) = args.json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&report.json())?)?;
    let md = report.markdown();
    if let Some(p) = &args.markdown {
        std::fs::write(p, &md)?;
    }
    println!("{md}");
    let missed = report.missed_budgets();
    if args.check && !missed.is_empty() {
        for m in &missed {
            eprintln!("budget missed: {m}");
        }
        std::process::exit(1);
    }
    Ok(())
}
