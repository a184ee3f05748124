//! The `graphstorm` scenario: `examples/graphstorm/dgljob.yaml` as written.
//! gconstruct partitions the example's tables in the partitioner pod,
//! GraphStorm's gsgnn_np trains on the two workers, and the job must reach
//! Succeeded with GraphStorm's loss falling by epoch in the launcher's log
//! and `status.progress` (from the example's sitecustomize hook) moving
//! through the epochs to the last one of its nc.yaml.
//!
//! Then two jobs on one volume (a hostPath folder, [`SHARED_DIR`], made
//! fresh and writable for the pods' uid): `dgljob-parmetis.yaml` (the tables
//! in DGL's chunked format, partitioned by the native pipeline, partition
//! mode ParMETIS, the partitions kept on the volume; gsgnn_np trains and
//! saves its model there) must Succeed with its loss falling and leave the
//! model and every part's orig_nids.dgl; then `dgljob-infer.yaml` (partition
//! mode Skip on those partitions, GraphStorm's gsgnn_node_emb restoring the
//! model) must Succeed and leave emb_info.json and, per worker, its
//! embedding rows (at least 4 bytes per node and hidden unit in all) and
//! their node ids, whose values must follow the tables' ids
//! (`dglrun/tests/graphstorm_embeddings.py`, as the host test checks them).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use dgl_api::DGLJob;
use kube::api::Api;
use kube::Client;

use super::scenarios::in_namespace;
use crate::stack::jobs::{
    delete_and_check_children, dump_job, example_succeeds_on, launcher_log, Place,
};
use crate::stack::placement::node0;
use crate::stack::Stack;
use crate::util::repo_root;

const EXAMPLE_GRAPHSTORM: &str = "examples/graphstorm/dgljob.yaml";
/// GraphStorm's config, whose `num_epochs` the progress must reach.
const NC_YAML: &str = "examples/graphstorm/nc.yaml";
/// The native partitions' training job and the inference job after it.
const EXAMPLE_PARMETIS: &str = "examples/graphstorm/dgljob-parmetis.yaml";
const EXAMPLE_INFER: &str = "examples/graphstorm/dgljob-infer.yaml";
/// The hostPath both of those jobs mount (their YAML's `path:`).
const SHARED_DIR: &str = "/var/tmp/dgl-gsexample";
/// Nodes of the example's tables (make_tables.py's default).
const NODES: u64 = 3000;

/// The GraphStorm image (6 GB) is only in node 0's containerd (the disk
/// holds one copy, `images::load`), so its jobs are held there.
pub(super) async fn graphstorm(stack: &Stack) -> Result<String> {
    let (client, job) = (&stack.client, "gsexample");
    let node0 = node0(&stack.cluster)?;
    let node = Some(node0.as_str());
    in_namespace(client, "e2e-graphstorm", job, |ns| async move {
        let gconstruct = graphstorm_in(client, &ns, job, node).await?;
        let native = native_then_infer(client, &ns, node).await?;
        Ok(format!("gconstruct: {gconstruct}; {native}"))
    })
    .await
}

/// The ParMETIS training job, then the inference job, on a fresh
/// [`SHARED_DIR`]; kept (and both jobs dumped) when something fails.
async fn native_then_infer(client: &Client, ns: &str, node: Option<&str>) -> Result<String> {
    let dir = std::path::Path::new(SHARED_DIR);
    fresh_shared_dir(dir)?;
    let (train, infer) = ("gsexample-pm", "gsexample-infer");
    let r = native_then_infer_in(client, ns, dir, (train, infer), node).await;
    match &r {
        Ok(_) => {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?
        }
        Err(_) => {
            dump_job(client, ns, train).await;
            dump_job(client, ns, infer).await;
            println!("    kept {} for inspection", dir.display());
        }
    }
    r
}

/// `dir` and `dir/dataset` (the partitioner's subPath) empty and writable
/// by the pods' uid (1000): a hostPath folder keeps the host's owner.
fn fresh_shared_dir(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    for d in [dir.to_path_buf(), dir.join("dataset")] {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))
            .with_context(|| format!("chmod 777 {}", d.display()))?;
    }
    Ok(())
}

async fn native_then_infer_in(
    client: &Client,
    ns: &str,
    dir: &std::path::Path,
    (train, infer): (&str, &str),
    node: Option<&str>,
) -> Result<String> {
    let nc = repo_root().join(NC_YAML);
    let epochs = config_number(&nc, "num_epochs")?;
    let took = example_succeeds_on(
        client,
        ns,
        train,
        EXAMPLE_PARMETIS,
        place(node),
        |_, _, _| {},
    )
    .await?;
    let log = launcher_log(client, ns, train).await?;
    let per_epoch = epoch_means(&loss_lines(&log));
    ensure!(
        per_epoch.len() >= 2 && per_epoch[per_epoch.len() - 1].1 < per_epoch[0].1,
        "GraphStorm's loss on the native partitions did not fall over 2+ epochs: {per_epoch:?}:\n{log}"
    );
    println!("    native partitions: loss by epoch {per_epoch:?}");
    let model = dir.join(format!("model/epoch-{}", epochs.saturating_sub(1)));
    ensure!(model.is_dir(), "no model saved at {}", model.display());
    for i in 0..2 {
        let f = dir.join(format!("dataset/part{i}/orig_nids.dgl"));
        ensure!(f.is_file(), "the native pipeline left no {}", f.display());
    }
    delete_and_check_children(client, ns, train).await?;

    let inferred =
        example_succeeds_on(client, ns, infer, EXAMPLE_INFER, place(node), |_, _, _| {}).await?;
    let hidden = config_number(&nc, "hidden_size")?;
    let (files, bytes) = embeddings_written(&dir.join("embeddings"), NODES * hidden * 4)?;
    let emb = dir.join("embeddings");
    let values = tokio::task::spawn_blocking(move || embeddings_follow_the_tables(&emb)).await??;
    delete_and_check_children(client, ns, infer).await?;
    Ok(format!(
        "native partitions (ParMETIS): Succeeded {:.0}s after apply, loss {:.3} -> {:.3}; inference: Succeeded {:.0}s after apply, {files} embedding files, {bytes} bytes, {values}",
        took.as_secs_f64(),
        per_epoch[0].1,
        per_epoch[per_epoch.len() - 1].1,
        inferred.as_secs_f64()
    ))
}

/// The embeddings' values, as dglrun/tests/graphstorm.rs checks them on
/// hosts (which the test command then skips: `COVERED_BY_E2E`): one per
/// node in the tables' ids, finite, and a nearest-class-centroid accuracy
/// above 0.6 against the labels of the tables built into the image
/// (make_tables.py's), with the GraphStorm venv's Python.
fn embeddings_follow_the_tables(emb: &std::path::Path) -> Result<String> {
    const CHECK: &str = include_str!("../../../dglrun/tests/graphstorm_embeddings.py");
    let root = repo_root();
    let python = crate::graphstorm_env::ensure(&root, &crate::pyenv::ensure_venv(&root)?)?;
    let tables = std::env::temp_dir().join(format!("dgl-e2e-gstables-{}", std::process::id()));
    if tables.exists() {
        std::fs::remove_dir_all(&tables)
            .with_context(|| format!("removing {}", tables.display()))?;
    }
    crate::images::copy_out_of_image(
        crate::images::Which::Graphstorm,
        "/opt/graphstorm/data",
        &tables,
    )?;
    let out = std::process::Command::new(&python)
        .args(["-c", CHECK])
        .arg(emb)
        .arg(&tables)
        .output()
        .with_context(|| format!("running {}", python.display()));
    std::fs::remove_dir_all(&tables).ok();
    let out = out?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    ensure!(
        out.status.success(),
        "the embeddings in {} against the image's tables: {text}\n{}",
        emb.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let accuracy: f64 = text
        .split("centroid_accuracy=")
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no accuracy in {text:?}"))?;
    ensure!(
        accuracy > 0.6,
        "the embeddings do not follow the tables' ids: {text}"
    );
    Ok(text)
}

/// GraphStorm's embedding folder: emb_info.json with world_size 2 (one
/// file per worker), `_N/embed-<rank>.pt` (rows) and
/// `_N/embed_nids-<rank>.pt` (their node ids) for each rank, the rows
/// together at least `min_bytes` (float32 rows of every node). Returns
/// (files, bytes of rows).
fn embeddings_written(dir: &std::path::Path, min_bytes: u64) -> Result<(usize, u64)> {
    let info_path = dir.join("emb_info.json");
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&info_path)
            .with_context(|| format!("reading {}", info_path.display()))?,
    )
    .with_context(|| format!("parsing {}", info_path.display()))?;
    let world = info["world_size"]
        .as_u64()
        .with_context(|| format!("{} has no world_size: {info}", info_path.display()))?;
    ensure!(
        world == 2,
        "{}: world_size {world}, expected 2",
        info_path.display()
    );
    let mut bytes = 0u64;
    for rank in 0..world {
        let f = dir.join(format!("_N/embed-{rank:05}.pt"));
        let len = std::fs::metadata(&f)
            .with_context(|| format!("the embeddings of rank {rank}: {}", f.display()))?
            .len();
        bytes = bytes.saturating_add(len);
        let ids = dir.join(format!("_N/embed_nids-{rank:05}.pt"));
        ensure!(
            ids.is_file(),
            "the node ids of rank {rank}: no {}",
            ids.display()
        );
    }
    ensure!(
        bytes >= min_bytes,
        "the embedding files in {} hold {bytes} bytes, fewer than {min_bytes} (4 per node and hidden unit)",
        dir.display()
    );
    Ok((world as usize, bytes))
}

async fn graphstorm_in(
    client: &Client,
    ns: &str,
    name: &str,
    node: Option<&str>,
) -> Result<String> {
    let epochs = num_epochs(&repo_root().join(NC_YAML))?;
    // Every distinct summary status.progress showed while the job ran.
    let mut seen: Vec<(String, Duration)> = Vec::new();
    let total = example_succeeds_on(
        client,
        ns,
        name,
        EXAMPLE_GRAPHSTORM,
        place(node),
        |j, _, at| {
            let summary = j.status.as_ref().and_then(|s| s.progress.as_ref());
            if let Some(s) = summary.map(|p| p.summary.clone()) {
                if seen.last().map(|(l, _)| l) != Some(&s) {
                    println!("    {:>6.1}s  status.progress: {s}", at.as_secs_f64());
                    seen.push((s, at));
                }
            }
        },
    )
    .await?;
    let log = launcher_log(client, ns, name).await?;
    let per_epoch = epoch_means(&loss_lines(&log));
    ensure!(
        per_epoch.len() >= 2,
        "GraphStorm's loss lines of at least 2 epochs expected in the launcher's log, got {per_epoch:?}:\n{log}"
    );
    let (first, last) = (per_epoch[0].1, per_epoch[per_epoch.len() - 1].1);
    ensure!(
        last < first,
        "GraphStorm's loss did not fall: {per_epoch:?}"
    );
    println!("    loss by epoch (mean of the logged batches): {per_epoch:?}");
    let accuracy = validation_scores(&log);
    println!("    validation accuracy: {accuracy:?}");
    check_progress(client, ns, name, epochs, &seen).await?;
    let deleted_in = delete_and_check_children(client, ns, name).await?;
    Ok(format!(
        "Succeeded {:.0}s after apply; loss {first:.3} -> {last:.3} over {} epochs, best validation accuracy {:.3}; progress {}; children deleted in {:.1}s",
        total.as_secs_f64(),
        per_epoch.len(),
        accuracy.iter().copied().fold(f64::NAN, f64::max),
        seen.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(", "),
        deleted_in.as_secs_f64()
    ))
}

/// status.progress went through at least two epochs while the job ran
/// and ends at `epoch N/N (100%)` with a loss.
async fn check_progress(
    client: &Client,
    ns: &str,
    name: &str,
    epochs: u32,
    seen: &[(String, Duration)],
) -> Result<()> {
    let job = Api::<DGLJob>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let progress = job.status.as_ref().and_then(|s| s.progress.as_ref());
    let want = format!("epoch {epochs}/{epochs} (100%)");
    ensure!(
        progress.is_some_and(|p| p.summary == want && p.loss.is_some()),
        "status.progress after Succeeded: {progress:?}, expected {want} with a loss"
    );
    ensure!(
        seen.len() >= 2,
        "status.progress showed fewer than two epochs while the job ran: {seen:?}"
    );
    Ok(())
}

/// `num_epochs: N` of GraphStorm's YAML config.
fn num_epochs(path: &std::path::Path) -> Result<u32> {
    let n = config_number(path, "num_epochs")?;
    u32::try_from(n).with_context(|| format!("{}: num_epochs {n} is too large", path.display()))
}

/// `<key>: N` of GraphStorm's YAML config (its first line of that key).
fn config_number(path: &std::path::Path, key: &str) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .with_context(|| format!("{} has no {key}", path.display()))?;
    value.trim().parse().with_context(|| {
        format!(
            "{}: {key} {:?} is not a whole number",
            path.display(),
            value.trim()
        )
    })
}

/// GraphStorm's loss lines in the launcher's log,
/// `[worker-0] INFO:root:Part 0 | Epoch 00003 | Batch 020 | Loss: 0.1453 | Time: 0.7705`:
/// (epoch, loss), in log order.
fn loss_lines(log: &str) -> Vec<(u32, f64)> {
    log.lines()
        .filter_map(|l| {
            let epoch = l.split("| Epoch ").nth(1)?.split_whitespace().next()?;
            let loss = l.split("| Loss: ").nth(1)?.split_whitespace().next()?;
            Some((epoch.parse().ok()?, loss.parse().ok()?))
        })
        .filter(|(_, loss): &(u32, f64)| loss.is_finite())
        .collect()
}

/// `Validation accuracy: 0.9183` lines: the scores in log order.
fn validation_scores(log: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|l| {
            l.split("Validation accuracy: ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The mean loss of each epoch's logged batches, in epoch order.
fn epoch_means(losses: &[(u32, f64)]) -> Vec<(u32, f64)> {
    let mut sums: std::collections::BTreeMap<u32, (f64, u32)> = Default::default();
    for &(e, l) in losses {
        let s = sums.entry(e).or_default();
        s.0 += l;
        s.1 += 1;
    }
    sums.into_iter()
        .map(|(e, (sum, n))| (e, sum / f64::from(n)))
        .collect()
}

/// A job held on `node` when given.
fn place(node: Option<&str>) -> Place<'_> {
    node.map_or(Place::Anywhere, Place::Node)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
[worker-0] INFO:root:Part 0 | Epoch 00000 | Batch 000 | Loss: 4.0000 | Time: 0.7705
[worker-0] INFO:root:Part 0 | Epoch 00000 | Batch 020 | Loss: 2.0000 | Time: 0.1
[worker-1] some other line | Epoch 7
[worker-0] INFO:root:Step 87 | Validation accuracy: 0.9183
[worker-0] INFO:root:Part 0 | Epoch 00001 | Batch 000 | Loss: nan | Time: 0.1
[worker-0] INFO:root:Part 0 | Epoch 00001 | Batch 020 | Loss: 0.5000 | Time: 0.1
";

    #[test]
    fn losses_are_read_per_epoch_and_averaged() {
        let lines = loss_lines(LOG);
        assert_eq!(lines, [(0, 4.0), (0, 2.0), (1, 0.5)]);
        assert_eq!(epoch_means(&lines), [(0, 3.0), (1, 0.5)]);
        assert_eq!(validation_scores(LOG), [0.9183]);
    }

    #[test]
    fn the_example_config_has_its_epochs() {
        assert_eq!(num_epochs(&repo_root().join(NC_YAML)).unwrap(), 4);
    }

    #[test]
    fn the_example_config_has_its_hidden_size() {
        assert_eq!(
            config_number(&repo_root().join(NC_YAML), "hidden_size").unwrap(),
            32
        );
    }

    #[test]
    fn embeddings_need_every_rank_their_ids_and_enough_bytes() {
        let dir = std::env::temp_dir().join(format!("gs-e2e-emb-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("_N")).unwrap();
        std::fs::write(dir.join("emb_info.json"), r#"{"world_size": 2}"#).unwrap();
        for rank in ["00000", "00001"] {
            std::fs::write(dir.join(format!("_N/embed-{rank}.pt")), [0u8; 60]).unwrap();
            std::fs::write(dir.join(format!("_N/embed_nids-{rank}.pt")), [0u8; 8]).unwrap();
        }
        assert_eq!(embeddings_written(&dir, 120).unwrap(), (2, 120));
        let e = format!("{:#}", embeddings_written(&dir, 121).unwrap_err());
        assert!(e.contains("120 bytes, fewer than 121"), "{e}");
        std::fs::remove_file(dir.join("_N/embed_nids-00001.pt")).unwrap();
        let e = format!("{:#}", embeddings_written(&dir, 1).unwrap_err());
        assert!(e.contains("embed_nids-00001.pt"), "{e}");
        std::fs::write(dir.join("emb_info.json"), r#"{"world_size": 3}"#).unwrap();
        let e = format!("{:#}", embeddings_written(&dir, 1).unwrap_err());
        assert!(e.contains("world_size 3, expected 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_config_without_epochs_names_the_file() {
        let dir = std::env::temp_dir().join(format!("gs-e2e-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.yaml");
        std::fs::write(&f, "gsf:\n  hyperparam:\n    num_epochs: four\n").unwrap();
        let e = format!("{:#}", num_epochs(&f).unwrap_err());
        assert!(e.contains("bad.yaml") && e.contains("four"), "{e}");
        std::fs::write(&f, "gsf: {}\n").unwrap();
        let e = format!("{:#}", num_epochs(&f).unwrap_err());
        assert!(e.contains("has no num_epochs"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
