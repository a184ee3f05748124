//! GraphBolt partitions (DGL 2.1.0's `use_graphbolt`; what 2.1.0 supports:
//! docs/dgl-runtime-notes.md, "GraphBolt"). Partitions still in DGL's
//! format are converted by DGL's own `dgl_partition_to_graphbolt`, which
//! reads every partition and writes `part<i>/fused_csc_sampling_graph.pt`
//! plus the `part_graph_graphbolt` keys into the partition JSON.

use std::path::Path;
use std::process::Stdio;

use crate::dataset::Layout;
use crate::procs::ProcSpec;

/// DGL's converter, run by `python -c` on the partition JSON.
const CONVERT: &str = "import sys\n\
from dgl.distributed import dgl_partition_to_graphbolt\n\
dgl_partition_to_graphbolt(sys.argv[1])\n";

/// The converter's command line for the partition JSON `part_config`.
pub fn converter(python: &str, part_config: &Path) -> ProcSpec {
    ProcSpec {
        name: "graphbolt-convert".into(),
        program: python.to_string(),
        args: vec![
            "-c".into(),
            CONVERT.into(),
            part_config.display().to_string(),
        ],
        env: vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("DGLBACKEND".into(), "pytorch".into()),
        ],
        cwd: None,
    }
}

/// The lock file workers that share one dataset folder take turns with.
pub const CONVERT_LOCK: &str = ".dglrun-graphbolt.lock";

/// Converts a Skip-mode worker's partitions in place when they are still in
/// DGL's format. DGL's converter reads every partition, so the workspace
/// must hold all `num_parts` of them (checked first, naming what is
/// missing); output goes to the log. Workers whose workspaces share one
/// volume take turns (flock(2) on [`CONVERT_LOCK`] in the dataset folder):
/// the first converts, the others find the partitions converted, instead of
/// several converters writing the same files at once.
pub async fn convert_local(python: &str, layout: &Layout, num_parts: u32) -> Result<(), String> {
    if layout.has_graphbolt_graphs() {
        return Ok(());
    }
    let _turn = take_turn(layout).await?;
    if layout.has_graphbolt_graphs() {
        tracing::info!(json = %layout.json_path().display(), "the partitions were converted to GraphBolt by another worker sharing this folder");
        return Ok(());
    }
    let plain = layout.clone().with_graphbolt(false);
    plain.check_all(num_parts).map_err(|e| {
        format!("GraphBolt was asked for and the partitions are in DGL's format; converting them (DGL's dgl_partition_to_graphbolt) needs every partition in this worker's workspace: {e}")
    })?;
    let spec = converter(python, &layout.json_path());
    tracing::info!(json = %layout.json_path().display(), "converting the partitions to GraphBolt");
    let out = tokio::process::Command::new(&spec.program)
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {} (GraphBolt conversion): {e}", spec.program))?;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        tracing::info!("[graphbolt-convert] {line}");
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "DGL's dgl_partition_to_graphbolt on {} exited with {}: {}",
            layout.json_path().display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(())
}

/// Waits for the dataset folder's conversion lock; the lock lasts as long as
/// the returned file is open. A file system without locks gets a warning
/// and no lock (a volume of one worker needs none).
async fn take_turn(layout: &Layout) -> Result<Option<std::fs::File>, String> {
    let json = layout.json_path();
    let path = json.parent().unwrap_or(Path::new(".")).join(CONVERT_LOCK);
    let shown = path.display().to_string();
    let locked = tokio::task::spawn_blocking(move || -> std::io::Result<Option<std::fs::File>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } == 0 {
                return Ok(Some(file));
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(None),
                _ => return Err(e),
            }
        }
    })
    .await
    .map_err(|e| format!("waiting for {shown}: {e}"))?
    .map_err(|e| format!("cannot lock {shown} (workers sharing the dataset folder convert it one at a time): {e}"))?;
    if locked.is_none() {
        tracing::warn!(lock = %shown, "the file system has no locks: converting without one; workers sharing this folder would convert it at the same time");
    }
    Ok(locked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_converter_is_dgls_own() {
        let c = converter("/venv/bin/python", Path::new("/w/dataset/g.json"));
        assert_eq!(c.args[0], "-c");
        assert!(c.args[1].contains("dgl_partition_to_graphbolt(sys.argv[1])"));
        assert_eq!(c.args[2], "/w/dataset/g.json");
    }
}
