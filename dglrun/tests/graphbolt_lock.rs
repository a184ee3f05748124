//! Skip-mode workers whose workspaces are one shared folder convert its
//! partitions to GraphBolt once: the second waits for the first's lock and
//! finds the JSON converted. A test binary of its own: the converter runs as
//! a child of the test process, and the unit tests that stop process trees
//! reap every child of theirs.

use std::path::Path;
use std::sync::Arc;

use dglrun::dataset::Layout;
use dglrun::dgl::graphbolt::{convert_local, Limits};

/// Graph `g` in `parts` partitions in DGL's layout, a few bytes per file.
fn fake_partitions(ws: &Path, parts: u32) -> Layout {
    let layout = Layout::new(ws, "g");
    let mut json = serde_json::json!({"graph_name": "g", "num_parts": parts});
    for i in 0..parts {
        json[format!("part-{i}")] = serde_json::json!({
            "node_feats": format!("part{i}/node_feat.dgl"),
            "edge_feats": format!("part{i}/edge_feat.dgl"),
            "part_graph": format!("part{i}/graph.dgl"),
        });
        let dir = layout.part_dir(i);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["node_feat.dgl", "edge_feat.dgl", "graph.dgl"] {
            std::fs::write(dir.join(f), format!("{i}{f}")).unwrap();
        }
    }
    std::fs::write(layout.json_path(), json.to_string()).unwrap();
    layout
}

/// The stand-in for Python counts its runs in `runs`, takes a second, and
/// adds the keys DGL's converter adds (the JSON is its third argument).
fn fake_python(dir: &Path, runs: &Path) -> String {
    let path = dir.join("python");
    let script = format!(
        r#"#!/bin/sh
echo run >> {runs}
sleep 1
exec python3 -c '
import json, sys
p = sys.argv[1]
j = json.load(open(p))
for k in [k for k in j if k.startswith("part-")]:
    j[k]["part_graph_graphbolt"] = k.replace("-", "") + "/fused_csc_sampling_graph.pt"
json.dump(j, open(p, "w"))
' "$3"
"#,
        runs = runs.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn workers_sharing_a_folder_convert_it_once() {
    let ws = tempfile::tempdir().unwrap();
    let layout = fake_partitions(ws.path(), 2).with_graphbolt(true);
    let runs = ws.path().join("runs");
    let python = fake_python(ws.path(), &runs);
    let (a, b) = tokio::join!(
        convert_local(&python, &layout, 2, Limits::default(), Arc::default()),
        convert_local(&python, &layout, 2, Limits::default(), Arc::default())
    );
    a.unwrap();
    b.unwrap();
    assert!(layout.has_graphbolt_graphs());
    let runs = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(runs.lines().count(), 1, "the converter ran once: {runs:?}");
}
