//! localkube: a real, local Kubernetes control plane for tests and development.
//!
//! * [`ensure_binaries`] builds kube-apiserver, kube-controller-manager,
//!   kube-scheduler, kubelet, kube-proxy (Kubernetes [`KUBERNETES_VERSION`]),
//!   etcd ([`ETCD_VERSION`]) and, with [`ensure_kwok`], kwok
//!   ([`KWOK_VERSION`]) from the Go module proxy and caches them under
//!   `$DGL_OPERATOR_CACHE` (default `~/.cache/dgl-operator`).
//! * [`LocalCluster`] runs etcd + kube-apiserver + kube-controller-manager
//!   (+ kube-scheduler) on 127.0.0.1 as detached processes; `up` reuses a
//!   healthy cluster in about a second.
//! * [`ensure_cluster`] and friends are what integration tests call.
//! * With [`ClusterConfig::with_node`] the cluster also gets a real node on
//!   this host: containerd + runc + the CNI bridge plugin (Debian packages,
//!   installed when missing), kubelet and kube-proxy ([`NodeConfig`]); the
//!   sandbox image is built locally ([`image`]). Needs root; `down` reverts
//!   every host change it recorded.
//!
//! * [`s3::S3Server`] runs SeaweedFS (`weed server -s3`, built and cached
//!   like the control plane) as a real S3-compatible server for tests.
//!
//! Nothing is mocked: tests talk to the real apiserver through kube-rs.
mod binaries;
mod cluster;
mod error;
mod faults;
mod handle;
pub mod host;
pub mod image;
mod kubeconfig;
mod node;
mod pki;
mod process;
pub mod s3;
mod settings;
mod testing;
mod tools;
mod util;

pub use binaries::{
    ensure_binaries, ensure_kwok, installed_binaries, Binaries, BuildOptions, ETCD_VERSION,
    KUBERNETES_VERSION, KUBE_COMMANDS, KWOK_VERSION,
};
pub use cluster::{ClusterInfo, ClusterStatus, ComponentStatus};
pub use error::{Error, Result};
pub use faults::Component;
pub use handle::LocalCluster;
pub use kubeconfig::{client_from_file, config_from_file};
pub use node::{NodePaths, NodeSummary, NodeTeardown, MAX_NODES};
pub use pki::{apiserver_sans, GeneratedPki, ADMIN_GROUP, ADMIN_USER, KUBERNETES_SERVICE_IP};
pub use settings::{
    ClusterConfig, NodeConfig, NodePorts, Ports, CNI_BRIDGE, CRI_NAMESPACE, DEFAULT_CLUSTER,
    NODE_INTERFACE, NODE_IP, NODE_PACKAGES, PAUSE_REPOSITORY, POD_CIDR, SERVICE_ACCOUNT_ISSUER,
    SERVICE_CIDR, TEST_CLUSTER,
};
pub use testing::{
    apply_crd, apply_crds, create_test_namespace, delete_namespace, ensure_cluster,
    ensure_cluster_with, test_client, unique_name, TestClusterOptions, FIELD_MANAGER,
    TEST_CLUSTER_ENV, TEST_KUBECONFIG_ENV, TEST_NAMESPACE_LABEL,
};
pub use tools::{ensure_tool, ensure_tool_file, installed_tool, GoTool, SEAWEEDFS_VERSION};
pub use util::{cache_dir, http_get, CACHE_ENV};

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use x509_parser::extensions::GeneralName;
    use x509_parser::pem::parse_x509_pem;

    use super::*;

    fn parse_cert(pem: &str) -> x509_parser::certificate::X509Certificate<'static> {
        let (_, pem) = parse_x509_pem(pem.as_bytes()).expect("PEM");
        let der: &'static [u8] = Box::leak(pem.contents.into_boxed_slice());
        x509_parser::parse_x509_certificate(der).expect("DER").1
    }

    /// The certificate's DNS and IP subject alternative names.
    fn alt_names(
        cert: &x509_parser::certificate::X509Certificate<'_>,
    ) -> (Vec<String>, Vec<Vec<u8>>) {
        let ext = cert
            .subject_alternative_name()
            .unwrap()
            .expect("SAN extension");
        let mut dns = Vec::new();
        let mut ips = Vec::new();
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => ips.push(b.to_vec()),
                _ => {}
            }
        }
        (dns, ips)
    }

    /// The subject's organizations (O=).
    fn organizations(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
        cert.subject()
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_string())
            .collect()
    }

    fn authority_key_id(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<u8> {
        cert.extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            })
            .expect("AKI")
    }

    fn subject_key_id(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<u8> {
        cert.extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => {
                    Some(k.0.to_vec())
                }
                _ => None,
            })
            .expect("SKI")
    }

    #[tokio::test]
    async fn pki_and_kubeconfig_round_trip() {
        let sans = apiserver_sans(&["192.0.2.10".to_string(), "node1.example".to_string()]);
        let pki = pki::generate(&sans).unwrap();

        // The apiserver certificate names every address clients dial.
        let server = parse_cert(&pki.apiserver_cert);
        let (dns, ips) = alt_names(&server);
        for d in [
            "localhost",
            "kubernetes",
            "kubernetes.default.svc",
            "node1.example",
        ] {
            assert!(
                dns.contains(&d.to_string()),
                "missing DNS SAN {d} in {dns:?}"
            );
        }
        for ip in [[127, 0, 0, 1], [10, 96, 0, 1], [192, 0, 2, 10]] {
            assert!(ips.contains(&ip.to_vec()), "missing IP SAN {ip:?}");
        }
        let ca = parse_cert(&pki.ca_cert);
        assert_eq!(server.issuer(), ca.subject());
        assert!(ca.is_ca());

        // The admin user is in system:masters (full access under RBAC).
        let admin = parse_cert(&pki.admin_cert);
        assert_eq!(organizations(&admin), vec![ADMIN_GROUP.to_string()]);
        assert_eq!(admin.issuer(), ca.subject());

        // The kubeconfig parses with kube-rs' own type and embeds the PEMs.
        let yaml = kubeconfig::render(
            "localkube-unit",
            "https://127.0.0.1:16443",
            &pki.ca_cert,
            &pki.admin_cert,
            &pki.admin_key,
        )
        .unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("localkube-unit"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:16443"));
        let ca_data = STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(ca_data).unwrap(), pki.ca_cert);
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        let cert = STANDARD
            .decode(user.client_certificate_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(cert).unwrap(), pki.admin_cert);

        // kube-rs (rustls) accepts the CA and the ECDSA PKCS#8 client key.
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:16443/");
        kube::Client::try_from(config).expect("client from generated kubeconfig");

        // A node client certificate, issued later from the CA key alone.
        let (node_pem, _key) =
            pki::client_cert(&pki.ca_key, "system:node:n1", Some("system:nodes")).unwrap();
        let node = parse_cert(&node_pem);
        assert_eq!(node.issuer(), ca.subject());
        assert_eq!(
            node.subject()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "system:node:n1"
        );
        assert_eq!(organizations(&node), vec!["system:nodes".to_string()]);
        // Its authority key id is the CA's subject key id, so verifiers find the CA.
        assert_eq!(authority_key_id(&node), subject_key_id(&ca));
    }
}
