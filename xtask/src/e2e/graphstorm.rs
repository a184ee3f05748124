//! The `graphstorm` scenario: `examples/graphstorm/dgljob.yaml` as written.
//! gconstruct partitions the example's tables in the partitioner pod,
//! GraphStorm's gsgnn_np trains on the two workers, and the job must reach
//! Succeeded with GraphStorm's loss falling by epoch in the launcher's log
//! and `status.progress` (from the example's sitecustomize hook) moving
//! through the epochs to the last one of its nc.yaml.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use dgl_api::DGLJob;
use kube::api::Api;
use kube::Client;

use super::scenarios::in_namespace;
use crate::stack::jobs::{delete_and_check_children, example_succeeds, launcher_log};
use crate::test::repo_root;

const EXAMPLE_GRAPHSTORM: &str = "examples/graphstorm/dgljob.yaml";
/// GraphStorm's config, whose `num_epochs` the progress must reach.
const NC_YAML: &str = "examples/graphstorm/nc.yaml";

pub(super) async fn graphstorm(client: &Client) -> Result<String> {
    let job = "gsexample";
    in_namespace(client, "e2e-graphstorm", job, |ns| async move {
        graphstorm_in(client, &ns, job).await
    })
    .await
}

async fn graphstorm_in(client: &Client, ns: &str, name: &str) -> Result<String> {
    let epochs = num_epochs(&repo_root().join(NC_YAML))?;
    // Every distinct summary status.progress showed while the job ran.
    let mut seen: Vec<(String, Duration)> = Vec::new();
    let total = example_succeeds(client, ns, name, EXAMPLE_GRAPHSTORM, |j, _, at| {
        let summary = j.status.as_ref().and_then(|s| s.progress.as_ref());
        if let Some(s) = summary.map(|p| p.summary.clone()) {
            if seen.last().map(|(l, _)| l) != Some(&s) {
                println!("    {:>6.1}s  status.progress: {s}", at.as_secs_f64());
                seen.push((s, at));
            }
        }
    })
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
/// and ends at `epoch N/N` with a loss.
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
    let want = format!("epoch {epochs}/{epochs}");
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
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("num_epochs:"))
        .with_context(|| format!("{} has no num_epochs", path.display()))?;
    value.trim().parse().with_context(|| {
        format!(
            "{}: num_epochs {:?} is not a whole number",
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
