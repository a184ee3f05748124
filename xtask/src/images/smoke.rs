//! The smoke test after a build: every built image run as a pod on the node,
//! each container's log checked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::wait::await_condition;

use super::names::{ImageDef, Which, VERSION};

/// What each image must do in a pod: (container name, command, expected output).
pub(super) fn smoke_containers(which: Which) -> Vec<(&'static str, Vec<&'static str>, String)> {
    match which {
        Which::Operator => vec![(
            "operator",
            vec!["/usr/local/bin/dgl-operator", "--version"],
            format!("dgl-operator {VERSION}"),
        )],
        Which::Runtime => vec![
            (
                "dglrun",
                vec!["dglrun", "--version"],
                format!("dglrun {VERSION}"),
            ),
            (
                "watcher-loop",
                vec!["watcher-loop", "--version"],
                format!("watcher-loop {VERSION}"),
            ),
        ],
        Which::Graphsage => vec![
            (
                "python",
                vec![
                    "python",
                    "-c",
                    "import dgl, torch; print('dgl', dgl.__version__, 'torch', torch.__version__)",
                ],
                "dgl 2.1.0 torch 2.2.1".into(),
            ),
            (
                "dglrun",
                vec!["dglrun", "--version"],
                format!("dglrun {VERSION}"),
            ),
            // Starts only if the image's OpenMPI provides what it links.
            (
                "dgl-partition",
                vec!["dgl-partition", "--version"],
                format!("dgl-partition {VERSION}"),
            ),
        ],
        Which::Graphstorm => vec![
            (
                "python",
                vec![
                    "python",
                    "-c",
                    "import graphstorm.run.gsgnn_np.gsgnn_np, dgl; \
                     from importlib.metadata import version; \
                     print('graphstorm', version('graphstorm'), 'dgl', dgl.__version__)",
                ],
                "graphstorm 0.5.0.post1 dgl 2.1.0".into(),
            ),
            (
                "tables",
                vec!["ls", "/opt/graphstorm/data"],
                "nodes.parquet".into(),
            ),
        ],
    }
}

/// Runs every built image as a pod on the node and checks each container's log.
pub(super) async fn smoke(
    cluster: &localkube::LocalCluster,
    built: &BTreeMap<Which, ImageDef>,
) -> Result<()> {
    let client = localkube::client_from_file(&cluster.kubeconfig_path()).await?;
    let ns = localkube::create_test_namespace(&client, "images-smoke").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for img in built.values() {
        let name = format!("{:?}", img.which).to_lowercase();
        let containers: Vec<serde_json::Value> = smoke_containers(img.which)
            .iter()
            .map(|(n, cmd, _)| {
                serde_json::json!({
                    "name": n, "image": img.reference, "command": cmd,
                    "imagePullPolicy": "Never",
                })
            })
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name },
            "spec": { "restartPolicy": "Never", "containers": containers },
        }))?;
        let t = Instant::now();
        pods.create(&PostParams::default(), &pod).await?;
        let done = await_condition(pods.clone(), &name, |p: Option<&Pod>| {
            matches!(
                p.and_then(|p| p.status.as_ref())
                    .and_then(|s| s.phase.as_deref()),
                Some("Succeeded") | Some("Failed")
            )
        });
        let pod = tokio::time::timeout(Duration::from_secs(300), done)
            .await
            .with_context(|| {
                format!("pod {ns}/{name} ({}) did not finish in 300s", img.reference)
            })??
            .context("pod vanished")?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        for (c, _, expect) in smoke_containers(img.which) {
            let log = pods
                .logs(
                    &name,
                    &LogParams {
                        container: Some(c.into()),
                        ..LogParams::default()
                    },
                )
                .await?;
            let ok = log.contains(&expect);
            eprintln!(
                "smoke: {} [{c}] {}: {}",
                img.reference,
                if ok { "ok" } else { "UNEXPECTED" },
                log.trim().lines().last().unwrap_or("")
            );
            if !ok {
                bail!(
                    "{} container {c}: expected {expect:?} in its log, got:\n{log}",
                    img.reference
                );
            }
        }
        if phase != "Succeeded" {
            bail!("pod {ns}/{name} ({}) ended {phase}", img.reference);
        }
        eprintln!(
            "smoke: {} ran in {:.1}s",
            img.reference,
            t.elapsed().as_secs_f64()
        );
    }
    localkube::delete_namespace(&client, &ns).await?;
    Ok(())
}
