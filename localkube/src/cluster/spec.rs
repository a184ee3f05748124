//! The command line of each control-plane component.
use std::path::{Path, PathBuf};

use crate::binaries::Binaries;
use crate::handle::LocalCluster;
use crate::pki::PkiFiles;
use crate::process::ProcSpec;
use crate::settings::{APISERVER, CONTROLLER_MANAGER, ETCD, SERVICE_ACCOUNT_ISSUER, SERVICE_CIDR};

impl LocalCluster {
    /// The command line of each component.
    pub(super) fn spec(&self, name: &'static str, bins: &Binaries, pki: &PkiFiles) -> ProcSpec {
        let p = &self.cfg.ports;
        let kubeconfig = self.kubeconfig_path();
        let path = |p: PathBuf| p.display().to_string();
        let args: Vec<String> = match name {
            ETCD => {
                let client = format!("http://127.0.0.1:{}", p.etcd_client);
                let peer = format!("http://127.0.0.1:{}", p.etcd_peer);
                vec![
                    format!("--name={}", self.cfg.name),
                    format!("--data-dir={}", path(self.etcd_dir())),
                    format!("--listen-client-urls={client}"),
                    format!("--advertise-client-urls={client}"),
                    format!("--listen-peer-urls={peer}"),
                    format!("--initial-advertise-peer-urls={peer}"),
                    format!("--initial-cluster={}={peer}", self.cfg.name),
                    // Test and dev data is disposable; fsync dominates write latency.
                    "--unsafe-no-fsync=true".into(),
                ]
            }
            APISERVER => {
                let mut a = vec![
                    format!("--etcd-servers=http://127.0.0.1:{}", p.etcd_client),
                    format!("--secure-port={}", p.apiserver),
                ];
                match &self.cfg.node {
                    // A node cluster: pods reach the apiserver through the
                    // `kubernetes` Service, so it must advertise (and serve
                    // on) the node IP, and the lease reconciler (the
                    // default) keeps that endpoint. Kubelets are authorized
                    // per node.
                    Some(n) => a.extend([
                        format!("--bind-address={}", n.node_ip),
                        format!("--advertise-address={}", n.node_ip),
                        "--authorization-mode=Node,RBAC".into(),
                        "--enable-admission-plugins=NodeRestriction".into(),
                        "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
                    ]),
                    // The `kubernetes` Endpoints would carry a loopback address,
                    // which Endpoints validation rejects; nothing here needs them.
                    None => a.extend([
                        "--bind-address=127.0.0.1".into(),
                        "--endpoint-reconciler-type=none".into(),
                        "--authorization-mode=RBAC".into(),
                    ]),
                }
                a.extend([
                    format!("--cert-dir={}", path(pki.dir.clone())),
                    format!("--tls-cert-file={}", path(pki.apiserver_cert())),
                    format!("--tls-private-key-file={}", path(pki.apiserver_key())),
                    format!("--client-ca-file={}", path(pki.ca_cert())),
                    "--allow-privileged=true".into(),
                    format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                    format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
                    format!("--service-account-key-file={}", path(pki.sa_pub())),
                    format!("--service-account-signing-key-file={}", path(pki.sa_key())),
                    // Lets logs/exec reach kubelets once a later tier runs one.
                    format!("--kubelet-client-certificate={}", path(pki.admin_cert())),
                    format!("--kubelet-client-key={}", path(pki.admin_key())),
                    "--profiling=false".into(),
                ]);
                a
            }
            // No --authentication/authorization-kubeconfig for the controller-manager
            // and scheduler: with them, both watch for a front-proxy (requestheader)
            // CA this apiserver does not have and log an error every few seconds.
            // Without, their secure port still serves /healthz (always allowed).
            CONTROLLER_MANAGER => vec![
                format!("--kubeconfig={}", path(kubeconfig)),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", p.controller_manager),
                "--leader-elect=false".into(),
                format!("--cluster-name={}", self.cfg.name),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                format!("--service-account-private-key-file={}", path(pki.sa_key())),
                format!("--root-ca-file={}", path(pki.ca_cert())),
                // CSR signing with the cluster CA (kubelet client certs later).
                format!("--cluster-signing-cert-file={}", path(pki.ca_cert())),
                format!("--cluster-signing-key-file={}", path(pki.ca_key())),
                "--use-service-account-credentials=true".into(),
                "--controllers=*".into(),
                "--profiling=false".into(),
            ],
            _ => vec![
                format!("--kubeconfig={}", path(kubeconfig)),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", p.scheduler),
                "--leader-elect=false".into(),
                "--profiling=false".into(),
            ],
        };
        ProcSpec {
            name,
            binary: binary_for(bins, name).to_owned(),
            args,
            env: Vec::new(),
        }
    }
}

pub(super) fn binary_for<'a>(bins: &'a Binaries, name: &str) -> &'a Path {
    match name {
        ETCD => &bins.etcd,
        APISERVER => &bins.kube_apiserver,
        CONTROLLER_MANAGER => &bins.kube_controller_manager,
        _ => &bins.kube_scheduler,
    }
}
