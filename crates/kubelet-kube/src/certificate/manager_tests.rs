use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use kubelet_types::clock::TestClock;

use super::*;

/// A signer: issues every request at once, or denies the first `deny` ones.
struct FakeCsr {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    clock: Arc<dyn Clock>,
    lifetime: Duration,
    deny: AtomicUsize,
    requests: Mutex<Vec<CsrRequest>>,
}

impl FakeCsr {
    fn new(clock: Arc<dyn Clock>, lifetime: Duration) -> Arc<Self> {
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, rcgen::KeyPair::generate().unwrap());
        Arc::new(Self { issuer, clock, lifetime, deny: AtomicUsize::new(0), requests: Mutex::new(vec![]) })
    }

    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[async_trait]
impl CsrClient for FakeCsr {
    async fn create(&self, req: &CsrRequest) -> Result<(String, String), CsrError> {
        let mut r = self.requests.lock().unwrap();
        r.push(req.clone());
        Ok((format!("csr-{}", r.len()), String::new()))
    }

    async fn wait(&self, name: &str, _uid: &str) -> Result<Vec<u8>, CsrError> {
        if self.deny.load(Ordering::SeqCst) > 0 {
            self.deny.fetch_sub(1, Ordering::SeqCst);
            return Err(CsrError::NotIssued { name: name.into(), message: "denied: no".into() });
        }
        let pem = self.requests.lock().unwrap().last().unwrap().request_pem.clone();
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let since = self.clock.now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let from = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(since.as_secs());
        csr.params.not_before = from;
        csr.params.not_after = from + self.lifetime;
        Ok(csr.signed_by(&self.issuer).unwrap().pem().into_bytes())
    }
}

#[derive(Default)]
struct Counts {
    failed: AtomicUsize,
    rotated: Mutex<Vec<Duration>>,
}

impl CertMetrics for Counts {
    fn renew_failed(&self) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }
    fn rotated(&self, lived: Duration) {
        self.rotated.lock().unwrap().push(lived);
    }
    fn current(&self, _: Option<SystemTime>) {}
}

fn client_template() -> Arc<dyn Fn() -> Option<Template> + Send + Sync> {
    Arc::new(|| {
        Some(Template {
            common_name: "system:node:n1".into(),
            organization: "system:nodes".into(),
            ..Default::default()
        })
    })
}

struct Setup {
    dir: tempfile::TempDir,
    clock: Arc<TestClock>,
    csr: Arc<FakeCsr>,
    metrics: Arc<Counts>,
}

impl Setup {
    fn new() -> Self {
        let clock = Arc::new(TestClock::new(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000)));
        let csr = FakeCsr::new(clock.clone(), Duration::from_secs(1000));
        Self { dir: tempfile::tempdir().unwrap(), clock, csr, metrics: Arc::default() }
    }

    fn manager(
        &self,
        template: Arc<dyn Fn() -> Option<Template> + Send + Sync>,
        usages: &'static [&'static str],
    ) -> Arc<Manager> {
        let cfg = ManagerConfig {
            kind: "client",
            signer: KUBELET_CLIENT_SIGNER,
            usages,
            store: FileStore::new(self.dir.path(), "kubelet-client", None, None),
            template,
            bootstrap_csr: None,
            metrics: self.metrics.clone(),
            clock: self.clock.clone(),
            jitter: || 0.5,
        };
        Arc::new(Manager::new(cfg).unwrap())
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(start_paused = true)]
async fn rotates_at_eighty_percent_of_the_lifetime_with_the_middle_jitter() {
    let s = Setup::new();
    let m = s.manager(client_template(), &CLIENT_USAGES);
    assert!(m.current().is_none());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.clone().run(s.csr.clone(), cancel.clone()));
    // No certificate: one is requested at once.
    until("the first certificate", || m.current().is_some()).await;
    let first = m.current().unwrap();
    let t0 = s.clock.now();
    assert_eq!(first.common_name, "system:node:n1");
    let req = s.csr.requests.lock().unwrap()[0].clone();
    assert_eq!(req.signer, KUBELET_CLIENT_SIGNER);
    assert_eq!(req.usages, ["digital signature", "client auth"]);
    assert!(req.name.is_empty(), "rotation requests use generateName");

    // Lifetime 1000 s, jitter 0.5: the deadline is 800 s after notBefore.
    tokio::time::sleep(Duration::from_secs(795)).await;
    assert_eq!(s.csr.count(), 1, "not before the deadline");
    let mut rx = m.subscribe();
    rx.mark_unchanged();
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.expect("rotated at the deadline").unwrap();
    let second = m.current().unwrap();
    assert_ne!(second.serial, first.serial);
    let at = s.clock.now().duration_since(t0).unwrap();
    assert!(at >= Duration::from_secs(799) && at <= Duration::from_secs(802), "{at:?}");
    let lived = s.metrics.rotated.lock().unwrap().clone();
    assert_eq!(lived.len(), 1);
    assert!(lived[0] >= Duration::from_secs(799) && lived[0] <= Duration::from_secs(802), "{lived:?}");
    let link = std::fs::read_link(s.dir.path().join("kubelet-client-current.pem")).unwrap();
    let on_disk = Pair::from_pem(&std::fs::read(&link).unwrap(), &std::fs::read(&link).unwrap()).unwrap();
    assert_eq!(on_disk.serial, second.serial, "the link names the pair in use");
    // A restarted manager picks the stored pair up.
    let again = s.manager(client_template(), &CLIENT_USAGES);
    assert_eq!(again.current().unwrap().serial, second.serial);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_denied_request_is_counted_and_retried_with_back_off() {
    let s = Setup::new();
    s.csr.deny.store(6, Ordering::SeqCst);
    let m = s.manager(client_template(), &CLIENT_USAGES);
    let cancel = CancellationToken::new();
    let t0 = tokio::time::Instant::now();
    let task = tokio::spawn(m.clone().run(s.csr.clone(), cancel.clone()));
    until("a certificate after the denials", || m.current().is_some()).await;
    let took = t0.elapsed();
    assert_eq!(s.metrics.failed.load(Ordering::SeqCst), 6);
    assert_eq!(s.csr.count(), 7);
    // 2 + 4 + 8 + 16 s (each up to 10 % longer), then 32 s twice.
    assert!(took >= Duration::from_secs(94) && took <= Duration::from_secs(100), "{took:?}");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_serving_certificate_waits_for_an_address_and_follows_address_changes() {
    let s = Setup::new();
    let addrs: Arc<Mutex<Vec<IpAddr>>> = Arc::default();
    let a = addrs.clone();
    let template: Arc<dyn Fn() -> Option<Template> + Send + Sync> = Arc::new(move || {
        let ips = a.lock().unwrap().clone();
        (!ips.is_empty()).then(|| Template {
            common_name: "system:node:n1".into(),
            organization: "system:nodes".into(),
            dns_names: vec!["n1".into()],
            ips,
        })
    });
    let m = s.manager(template, &SERVING_USAGES);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.clone().run(s.csr.clone(), cancel.clone()));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(s.csr.count(), 0, "no request without an address");
    addrs.lock().unwrap().push("10.0.0.7".parse().unwrap());
    until("a serving certificate", || m.current().is_some()).await;
    let p = m.current().unwrap();
    assert_eq!((p.dns_names.clone(), p.ips.clone()), (vec!["n1".to_string()], vec!["10.0.0.7".parse().unwrap()]));
    assert_eq!(s.csr.requests.lock().unwrap()[0].usages, ["digital signature", "server auth"]);
    // A new address is asked for within seconds, long before the deadline.
    addrs.lock().unwrap().push("10.0.0.8".parse().unwrap());
    let t0 = tokio::time::Instant::now();
    until("a certificate with the new address", || m.current().unwrap().ips.len() == 2).await;
    assert!(t0.elapsed() <= Duration::from_secs(2), "{:?}", t0.elapsed());
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_expired_certificate_is_renewed_with_the_bootstrap_credentials() {
    let s = Setup::new();
    let (c, k) = crate::certificate::pair::tests::issue(
        "system:node:n1",
        s.clock.now() - Duration::from_secs(2000),
        Duration::from_secs(1000),
        &[],
    );
    FileStore::new(s.dir.path(), "kubelet-client", None, None)
        .update(c.as_bytes(), k.as_bytes(), s.clock.now())
        .unwrap();
    let bootstrap = FakeCsr::new(s.clock.clone(), Duration::from_secs(1000));
    let cfg = ManagerConfig {
        kind: "client",
        signer: KUBELET_CLIENT_SIGNER,
        usages: &CLIENT_USAGES,
        store: FileStore::new(s.dir.path(), "kubelet-client", None, None),
        template: client_template(),
        bootstrap_csr: Some(bootstrap.clone()),
        metrics: s.metrics.clone(),
        clock: s.clock.clone(),
        jitter: || 0.5,
    };
    let m = Arc::new(Manager::new(cfg).unwrap());
    assert!(!m.current().unwrap().valid_at(s.clock.now()));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.clone().run(s.csr.clone(), cancel.clone()));
    until("a valid certificate", || m.current().unwrap().valid_at(s.clock.now())).await;
    assert_eq!((bootstrap.count(), s.csr.count()), (1, 0), "the expired certificate cannot authenticate");
    cancel.cancel();
    task.await.unwrap();
}
