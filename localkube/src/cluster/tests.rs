use super::*;
use std::path::Path;

use crate::settings::ClusterConfig;

#[test]
fn ports_do_not_collide_between_names() {
    let names = ["dev", "test", "e2e", "kwok", "bench", "a", "b", "c"];
    let mut all = Vec::new();
    for n in names {
        let p = Ports::for_name(n);
        let mine = [
            p.apiserver,
            p.etcd_client,
            p.etcd_peer,
            p.controller_manager,
            p.scheduler,
        ];
        for port in mine {
            assert!(port > 1024);
            all.push((port, n));
        }
    }
    for (i, (port, n)) in all.iter().enumerate() {
        for (other, m) in &all[i + 1..] {
            // Two names with the same hash bucket share ports by design
            // (9 buckets); but different component ports never coincide.
            if n != m && Ports::for_name(n) != Ports::for_name(m) {
                assert_ne!(port, other, "{n} and {m} collide on {port}");
            }
        }
    }
    assert_eq!(Ports::for_name("dev").apiserver, 6443);
    assert_eq!(Ports::for_name("test").apiserver, 16443);
}

#[test]
fn component_args_are_loopback_only() {
    let cfg = ClusterConfig {
        name: "unit".into(),
        scheduler: true,
        ports: Ports::for_name("unit"),
        extra_sans: vec![],
        cache_dir: PathBuf::from("/nonexistent-cache"),
        build_if_missing: false,
        node: None,
    };
    let c = LocalCluster::new(cfg).unwrap();
    // A missing cache is an error naming the file, not a panic.
    let err = binaries::installed_binaries(Path::new("/nonexistent-cache")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent-cache"), "{err}");
    let fake = Binaries {
        kubernetes_version: "v1.33.13".into(),
        kube_apiserver: "/b/kube-apiserver".into(),
        kube_controller_manager: "/b/kube-controller-manager".into(),
        kube_scheduler: "/b/kube-scheduler".into(),
        kubelet: "/b/kubelet".into(),
        kube_proxy: "/b/kube-proxy".into(),
        etcd_version: "v3.5.21".into(),
        etcd: "/b/etcd".into(),
        kwok_version: "v0.7.0".into(),
        kwok: "/b/kwok".into(),
        kwokctl: "/b/kwokctl".into(),
    };
    let pki = c.pki();
    for name in COMPONENTS {
        let spec = c.spec(name, &fake, &pki);
        for a in &spec.args {
            assert!(!a.contains("0.0.0.0"), "{name}: {a}");
            if a.contains("://") && !a.contains("kubernetes.default.svc") {
                assert!(a.contains("127.0.0.1"), "{name}: {a}");
            }
        }
    }
    let api = c.spec(APISERVER, &fake, &pki);
    assert!(api
        .args
        .contains(&"--endpoint-reconciler-type=none".to_string()));
    assert!(!api
        .args
        .iter()
        .any(|a| a.starts_with("--disable-admission-plugins")));

    // A node cluster: the apiserver serves and advertises the node IP,
    // keeps the endpoint reconciler and authorizes kubelets per node.
    let mut cfg = c.config().clone().with_node();
    cfg.cache_dir = PathBuf::from("/nonexistent-cache");
    let n = LocalCluster::new(cfg).unwrap();
    let api = n.spec(APISERVER, &fake, &pki).args;
    let ip = crate::settings::NODE_IP;
    for want in [
        format!("--bind-address={ip}"),
        format!("--advertise-address={ip}"),
        "--authorization-mode=Node,RBAC".to_string(),
        "--enable-admission-plugins=NodeRestriction".to_string(),
    ] {
        assert!(api.contains(&want), "{want} missing from {api:?}");
    }
    assert!(!api
        .iter()
        .any(|a| a.starts_with("--endpoint-reconciler-type")));
    assert_eq!(
        n.server(),
        format!("https://{ip}:{}", n.config().ports.apiserver)
    );
    assert!(n.config().scheduler, "a node needs the scheduler");
}
