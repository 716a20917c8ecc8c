//! Runs one target: proptest generates and shrinks the inputs; every case runs on a worker thread (the stack
//! of a tokio worker, 2 MiB) under a watchdog (the per-case timeout), with its allocation counted
//! ([`crate::alloc`]) and its panics caught (a panic hook records them silently, those of tasks spawned on the
//! case's own runtime too).
//!
//! A panic, a property violation or an allocation over the limit is shrunk to a minimal input. A case that
//! outruns the timeout or reaches the hard allocation cap cannot be stopped: its worker is abandoned (a worker
//! over the cap sleeps for good without the memory), the input is reported as it was, and the target stops.

// The watchdog and the timings are about real time: no paused clock is ever involved.
#![allow(clippy::disallowed_methods)]

use std::cell::{Cell, RefCell};
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, mpsc};
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

use crate::alloc::Tracking;
use crate::{Budget, Failure, FailureKind, Options, Report};

/// A property over one input: `Err` names what does not hold.
pub(crate) type Check<V> = Arc<dyn Fn(&V) -> Result<(), String> + Send + Sync>;

/// Stack of a worker: what a tokio worker thread has, where the kubelet parses most of its input.
const WORKER_STACK: usize = 2 * 1024 * 1024;
/// Longest rendering of an input in a report (minimal inputs are short; a hang's input is not shrunk).
const MAX_INPUT_TEXT: usize = 64 * 1024;

thread_local! {
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) the panic hook that records, without printing, the panics of running cases.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.with(Cell::get) {
                let text = info.to_string();
                LAST_PANIC.with(|p| {
                    let mut p = p.borrow_mut();
                    if p.is_none() {
                        *p = Some(text);
                    }
                });
                return;
            }
            previous(info);
        }));
    });
}

type Job = Box<dyn FnOnce() -> Result<(), String> + Send>;

enum Outcome {
    Pass,
    Property(String),
    Panic(String),
}

struct Done {
    outcome: Outcome,
    elapsed: Duration,
    peak: usize,
}

struct Worker {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
    over: Arc<AtomicBool>,
}

impl Worker {
    fn spawn(name: &str, cap: usize) -> Worker {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let over = Arc::new(AtomicBool::new(false));
        let flag = over.clone();
        std::thread::Builder::new()
            .name(format!("kubelet-fuzz-{name}"))
            .stack_size(WORKER_STACK)
            .spawn(move || {
                for job in job_rx {
                    LAST_PANIC.with(|p| p.borrow_mut().take());
                    IN_CASE.with(|c| c.set(true));
                    let tracking = Tracking::start(cap, Some(&flag));
                    let start = Instant::now();
                    let r = std::panic::catch_unwind(AssertUnwindSafe(job));
                    let elapsed = start.elapsed();
                    let peak = tracking.finish();
                    IN_CASE.with(|c| c.set(false));
                    // A panic in a task the case spawned is caught by its runtime but recorded by the hook.
                    let recorded = LAST_PANIC.with(|p| p.borrow_mut().take());
                    let outcome = match (r, recorded) {
                        (Err(_), Some(p)) | (Ok(_), Some(p)) => Outcome::Panic(p),
                        (Err(payload), None) => Outcome::Panic(payload_text(payload.as_ref())),
                        (Ok(Err(m)), None) => Outcome::Property(m),
                        (Ok(Ok(())), None) => Outcome::Pass,
                    };
                    if done_tx.send(Done { outcome, elapsed, peak }).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning a fuzz worker");
        Worker { jobs, done, over }
    }
}

fn payload_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Debug text of an input, cut at [`MAX_INPUT_TEXT`] (on a character boundary).
pub(crate) fn render<V: Debug>(v: &V, max: usize) -> String {
    let mut s = format!("{v:?}");
    if s.len() > max.min(MAX_INPUT_TEXT) {
        let mut cut = max.min(MAX_INPUT_TEXT);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// What the runner keeps across cases.
struct State {
    cases: u64,
    slowest: Duration,
    slowest_input: String,
    peak: usize,
    worker: Option<Worker>,
    /// A hang or a hard-cap case: nothing more runs.
    dead: Option<Failure>,
    /// The kind of the last failing case (the minimal one, once shrinking ends).
    last_kind: FailureKind,
}

/// Runs `check` over inputs of `strategy` within `opts`.
pub(crate) fn run<S>(name: &'static str, opts: &Options, strategy: S, check: Check<S::Value>) -> Report
where
    S: Strategy,
    S::Value: Clone + Send + Debug + 'static,
{
    install_panic_hook();
    let started = Instant::now();
    let state = RefCell::new(State {
        cases: 0,
        slowest: Duration::ZERO,
        slowest_input: String::new(),
        peak: 0,
        worker: None,
        dead: None,
        last_kind: FailureKind::Panic,
    });
    let test = |v: S::Value| -> Result<(), TestCaseError> { one_case(name, opts, &state, &check, v) };
    let mut failure = None;
    let mut batch: u64 = 0;
    loop {
        let cases = match opts.budget {
            Budget::Cases(n) => n,
            Budget::Time(total) => {
                let left = total.saturating_sub(started.elapsed());
                if left.is_zero() && batch > 0 {
                    break;
                }
                let st = state.borrow();
                // Batches of about a second (at least a few cases, so a short slice still runs some).
                let per_case = started.elapsed().as_secs_f64() / (st.cases.max(1) as f64);
                let fit = (left.min(Duration::from_secs(1)).as_secs_f64() / per_case.max(1e-6)) as u32;
                if batch == 0 { 16 } else { fit.clamp(4, 20_000) }
            }
        };
        let config = Config {
            cases,
            failure_persistence: None,
            max_shrink_time: 60_000,
            max_shrink_iters: 20_000,
            rng_seed: RngSeed::Fixed(opts.seed.wrapping_add(batch)),
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let result = runner.run(&strategy, test);
        batch += 1;
        let dead = state.borrow_mut().dead.take();
        if let Some(d) = dead {
            failure = Some(d);
            break;
        }
        match result {
            Ok(()) => {}
            Err(TestError::Fail(reason, minimal)) => {
                failure = Some(Failure {
                    kind: state.borrow().last_kind,
                    message: reason.message().to_string(),
                    minimal_input: render(&minimal, MAX_INPUT_TEXT),
                });
                break;
            }
            Err(TestError::Abort(reason)) => {
                failure = Some(Failure {
                    kind: FailureKind::Property,
                    message: format!("the strategy gave up: {}", reason.message()),
                    minimal_input: String::new(),
                });
                break;
            }
        }
        if matches!(opts.budget, Budget::Cases(_)) {
            break;
        }
    }
    let st = state.into_inner();
    Report {
        target: name,
        cases: st.cases,
        elapsed: started.elapsed(),
        slowest: st.slowest,
        slowest_input: st.slowest_input,
        peak_alloc: st.peak,
        failure,
    }
}

fn one_case<V>(
    name: &'static str,
    opts: &Options,
    state: &RefCell<State>,
    check: &Check<V>,
    v: V,
) -> Result<(), TestCaseError>
where
    V: Clone + Send + Debug + 'static,
{
    let mut st = state.borrow_mut();
    if st.dead.is_some() {
        return Ok(());
    }
    let input = v.clone();
    let c = check.clone();
    let worker = st.worker.get_or_insert_with(|| Worker::spawn(name, opts.alloc_cap));
    if worker.jobs.send(Box::new(move || c(&input))).is_err() {
        return Err(TestCaseError::fail("the fuzz worker is gone"));
    }
    let deadline = Instant::now() + opts.timeout;
    let done = loop {
        match worker.done.recv_timeout(Duration::from_millis(20)) {
            Ok(d) => break d,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let (kind, message) = if worker.over.load(Ordering::SeqCst) {
                    (FailureKind::Alloc, format!("allocated more than the hard cap of {} MiB", opts.alloc_cap >> 20))
                } else if Instant::now() >= deadline {
                    (FailureKind::Hang, format!("did not return within {:?}", opts.timeout))
                } else {
                    continue;
                };
                // The worker cannot be stopped: it is left behind (detached), and nothing else runs.
                st.worker = None;
                st.cases += 1;
                st.dead = Some(Failure { kind, message: message.clone(), minimal_input: render(&v, MAX_INPUT_TEXT) });
                return Err(TestCaseError::fail(message));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                st.worker = None;
                st.last_kind = FailureKind::Panic;
                return Err(TestCaseError::fail("the fuzz worker died"));
            }
        }
    };
    st.cases += 1;
    st.peak = st.peak.max(done.peak);
    if done.elapsed > st.slowest {
        st.slowest = done.elapsed;
        st.slowest_input = render(&v, 160);
    }
    let (kind, message) = match done.outcome {
        Outcome::Pass if done.peak > opts.alloc_limit => (
            FailureKind::Alloc,
            format!("allocated {} MiB at its peak (limit {} MiB)", done.peak >> 20, opts.alloc_limit >> 20),
        ),
        Outcome::Pass => return Ok(()),
        Outcome::Property(m) => (FailureKind::Property, m),
        Outcome::Panic(m) => (FailureKind::Panic, format!("panicked: {m}")),
    };
    st.last_kind = kind;
    Err(TestCaseError::fail(message))
}

/// The report of a target that could not start (its scratch folder, its runtime).
pub(crate) fn setup_failure(name: &'static str, message: String) -> Report {
    Report {
        target: name,
        cases: 0,
        elapsed: Duration::ZERO,
        slowest: Duration::ZERO,
        slowest_input: String::new(),
        peak_alloc: 0,
        failure: Some(Failure { kind: FailureKind::Setup, message, minimal_input: String::new() }),
    }
}
