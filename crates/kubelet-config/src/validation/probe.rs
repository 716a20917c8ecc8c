//! Probes and lifecycle hooks (`pkg/apis/core/validation/validation.go`: validateLivenessProbe,
//! validateReadinessProbe, validateStartupProbe, validateProbe, validateHandler, validateHTTPGetAction,
//! ValidatePortNumOrName, validateSleepAction, validateLifecycle, validateStopSignal). Probe fields are checked
//! after the API's defaults (`SetDefaults_Probe`, `SetDefaults_HTTPGetAction`), so an unset period is 10, not 0.

use k8s_openapi::api::core::v1::{
    ExecAction, GRPCAction, HTTPGetAction, Lifecycle, LifecycleHandler, Probe, SleepAction, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::container::PodContext;
use super::field::{ErrorList, Path, forbidden, invalid, not_supported, required};
use super::names::{is_http_header_name, is_valid_port_name, is_valid_port_num};

/// Which probe: liveness and startup probes must have `successThreshold: 1`; readiness probes may not set a
/// termination grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `livenessProbe`.
    Liveness,
    /// `readinessProbe`.
    Readiness,
    /// `startupProbe`.
    Startup,
}

struct Handler<'a> {
    exec: Option<&'a ExecAction>,
    http_get: Option<&'a HTTPGetAction>,
    tcp_socket: Option<&'a TCPSocketAction>,
    grpc: Option<&'a GRPCAction>,
    sleep: Option<&'a SleepAction>,
}

/// Validates one probe, if set.
pub fn validate_probe_of(probe: Option<&Probe>, kind: ProbeKind, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(p) = probe else { return errs };
    let handler = Handler {
        exec: p.exec.as_ref(),
        http_get: p.http_get.as_ref(),
        tcp_socket: p.tcp_socket.as_ref(),
        grpc: p.grpc.as_ref(),
        sleep: None,
    };
    errs.extend(validate_handler(&handler, ctx, path));
    for (v, field) in [
        (p.initial_delay_seconds, "initialDelaySeconds"),
        (p.timeout_seconds, "timeoutSeconds"),
        (p.period_seconds, "periodSeconds"),
        (p.success_threshold, "successThreshold"),
        (p.failure_threshold, "failureThreshold"),
    ] {
        let v = v.unwrap_or(0);
        if v < 0 {
            errs.push(invalid(&path.child(field), v, "must be greater than or equal to 0"));
        }
    }
    if let Some(g) = p.termination_grace_period_seconds.filter(|g| *g <= 0) {
        errs.push(invalid(&path.child("terminationGracePeriodSeconds"), g, "must be greater than 0"));
    }
    match kind {
        ProbeKind::Liveness | ProbeKind::Startup => {
            let st = p.success_threshold.unwrap_or(0);
            if st != 1 {
                errs.push(invalid(&path.child("successThreshold"), st, "must be 1"));
            }
        }
        ProbeKind::Readiness => {
            if let Some(g) = p.termination_grace_period_seconds {
                errs.push(invalid(
                    &path.child("terminationGracePeriodSeconds"),
                    g,
                    "must not be set for readinessProbes",
                ));
            }
        }
    }
    errs
}

fn handler_of(h: &LifecycleHandler) -> Handler<'_> {
    Handler {
        exec: h.exec.as_ref(),
        http_get: h.http_get.as_ref(),
        tcp_socket: h.tcp_socket.as_ref(),
        grpc: None,
        sleep: h.sleep.as_ref(),
    }
}

/// `validateHandler`: exactly one handler type.
fn validate_handler(h: &Handler<'_>, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut n = 0;
    let mut one = |set: bool, field: &str, errs: &mut ErrorList| -> bool {
        if !set {
            return false;
        }
        if n > 0 {
            errs.push(forbidden(&path.child(field), "may not specify more than 1 handler type"));
            return false;
        }
        n += 1;
        true
    };
    if one(h.exec.is_some(), "exec", &mut errs)
        && let Some(e) = h.exec
        && e.command.as_ref().is_none_or(|c| c.is_empty())
    {
        errs.push(required(&path.child("exec").child("command"), ""));
    }
    if one(h.http_get.is_some(), "httpGet", &mut errs)
        && let Some(g) = h.http_get
    {
        let gp = path.child("httpGet");
        if g.path.as_deref().unwrap_or("").is_empty() {
            errs.push(required(&gp.child("path"), ""));
        }
        errs.extend(validate_port_num_or_name(&g.port, &gp.child("port")));
        let scheme = g.scheme.as_deref().unwrap_or("");
        if !matches!(scheme, "HTTP" | "HTTPS") {
            errs.push(not_supported(&gp.child("scheme"), scheme, &["HTTP", "HTTPS"]));
        }
        for header in g.http_headers.iter().flatten() {
            for m in is_http_header_name(&header.name) {
                errs.push(invalid(&gp.child("httpHeaders"), header.name.as_str(), m));
            }
        }
    }
    if one(h.tcp_socket.is_some(), "tcpSocket", &mut errs)
        && let Some(t) = h.tcp_socket
    {
        errs.extend(validate_port_num_or_name(&t.port, &path.child("tcpSocket").child("port")));
    }
    if one(h.grpc.is_some(), "grpc", &mut errs)
        && let Some(g) = h.grpc
    {
        errs.extend(validate_port_num_or_name(&IntOrString::Int(g.port), &path.child("grpc").child("port")));
    }
    if one(h.sleep.is_some(), "sleep", &mut errs)
        && let (Some(s), Some(grace)) = (h.sleep, ctx.grace_period)
        && (s.seconds <= 0 || s.seconds > grace)
    {
        errs.push(invalid(
            &path.child("sleep"),
            s.seconds,
            format!(
                "must be greater than 0 and less than terminationGracePeriodSeconds ({grace}). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep."
            ),
        ));
    }
    if n == 0 {
        errs.push(required(path, "must specify a handler type"));
    }
    errs
}

/// `ValidatePortNumOrName`.
fn validate_port_num_or_name(port: &IntOrString, path: &Path) -> ErrorList {
    match port {
        IntOrString::Int(n) => {
            ErrorList(is_valid_port_num((*n).into()).into_iter().map(|m| invalid(path, *n, m)).collect())
        }
        IntOrString::String(s) => {
            ErrorList(is_valid_port_name(s).into_iter().map(|m| invalid(path, s.as_str(), m)).collect())
        }
    }
}

const LINUX_SIGNALS: &[&str] = &[
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPOLL",
    "SIGPROF",
    "SIGPWR",
    "SIGQUIT",
    "SIGRTMAX",
    "SIGRTMAX-1",
    "SIGRTMAX-10",
    "SIGRTMAX-11",
    "SIGRTMAX-12",
    "SIGRTMAX-13",
    "SIGRTMAX-14",
    "SIGRTMAX-2",
    "SIGRTMAX-3",
    "SIGRTMAX-4",
    "SIGRTMAX-5",
    "SIGRTMAX-6",
    "SIGRTMAX-7",
    "SIGRTMAX-8",
    "SIGRTMAX-9",
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGSEGV",
    "SIGSTKFLT",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
];

/// `validateLifecycle`: the hooks' handlers and the stop signal (which needs `spec.os.name`).
pub fn validate_lifecycle(l: &Lifecycle, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if let Some(h) = &l.post_start {
        errs.extend(validate_handler(&handler_of(h), ctx, &path.child("postStart")));
    }
    if let Some(h) = &l.pre_stop {
        errs.extend(validate_handler(&handler_of(h), ctx, &path.child("preStop")));
    }
    if let Some(sig) = l.stop_signal.as_deref() {
        let sp = path.child("stopSignal");
        match ctx.os {
            None => errs.push(forbidden(&sp, "may not be set for containers with empty `spec.os.name`")),
            Some("windows") if !matches!(sig, "SIGKILL" | "SIGTERM") => {
                errs.push(not_supported(&sp, sig, &["SIGKILL", "SIGTERM"]))
            }
            Some("linux") if !LINUX_SIGNALS.contains(&sig) => errs.push(not_supported(&sp, sig, LINUX_SIGNALS)),
            Some(_) => {}
        }
    }
    errs
}
