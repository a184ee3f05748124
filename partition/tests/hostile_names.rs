//! Names from input never become paths outside the output (issue #36,
//! item 1). A chunked graph whose node type, relation, feature or graph
//! name is a path (`../../../escape`) is refused by every driver — the
//! single process (ParMETIS mode), a rank (`dgl-partition rank`, with and
//! without `--gather-structure`) — before any file is opened or written:
//! the folders around the workspace list exactly what they did before.
//! The assignment's reader and writer refuse such a name too.

mod input_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use dgl_partition::assign::{read_files, write_files, Assignment};
use dgl_partition::config::{AllParts, Config};
use dgl_partition::input::{write_chunked, EdgeFormat, Source};
use dgl_partition::run;
use dgl_partition::settings::Choice;
use input_common::*;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_dgl-partition");
const EVIL: &str = "../../../escape";

/// Every file and folder below `root` but the output folder `skip`, files
/// with their size and modification time: what was created, truncated or
/// written.
fn listing(root: &Path, skip: &Path) -> BTreeMap<PathBuf, (u64, Option<SystemTime>)> {
    fn walk(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, (u64, Option<SystemTime>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p == skip {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                // Its entries are listed; its time changes when the
                // output folder in it is created.
                out.insert(p.clone(), (0, None));
                walk(&p, skip, out);
            } else {
                out.insert(p.clone(), (m.len(), m.modified().ok()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, skip, &mut out);
    out
}

/// `<tmp>/top/ws/chunked/metadata.json`, the output `<tmp>/top/ws/dataset`
/// (as dglrun's partitioner lays them out): `dataset/partition_assignment/`
/// + `../../../escape.txt` is `<tmp>/top/escape.txt`, outside the workspace.
struct Layout {
    tmp: tempfile::TempDir,
}

impl Layout {
    fn new(edit: impl FnOnce(&mut Value)) -> Layout {
        let tmp = tempfile::tempdir().unwrap();
        let chunked = tmp.path().join("top/ws/chunked");
        let meta = write_chunked(&homogeneous(), &chunked, 2, EdgeFormat::Csv).unwrap();
        edit_metadata(&meta, edit);
        Layout { tmp }
    }
    fn meta(&self) -> PathBuf {
        self.tmp.path().join("top/ws/chunked/metadata.json")
    }
    fn out(&self) -> PathBuf {
        self.tmp.path().join("top/ws/dataset")
    }
    fn listing(&self) -> BTreeMap<PathBuf, (u64, Option<SystemTime>)> {
        listing(self.tmp.path(), &self.out())
    }
}

/// Renames node type `_N` (and the edge type and keys naming it) to `to`.
fn rename_ntype(to: &str) -> impl Fn(&mut Value) + '_ {
    move |v| {
        let canonical = format!("{to}:_E:{to}");
        v["node_type"] = json!([to]);
        v["edge_type"] = json!([canonical]);
        let edges = v["edges"]["_N:_E:_N"].take();
        v["edges"] = json!({ canonical.clone(): edges });
        let nd = v["node_data"]["_N"].take();
        v["node_data"] = json!({ to: nd });
        let ed = v["edge_data"]["_N:_E:_N"].take();
        v["edge_data"] = json!({ canonical: ed });
    }
}

fn single_process(l: &Layout) -> dgl_partition::Result<()> {
    let cfg = Config {
        source: Source::Chunked { metadata: l.meta() },
        out_dir: l.out(),
        graph_name: "g".into(),
        partitioner: Choice::Random,
        balance_train: None,
        balance_edges: false,
        threads: 2,
        seed: 7,
        driver: AllParts { num_parts: 2 },
    };
    run::run(&cfg).map(|_| ())
}

/// `dgl-partition rank` as a world of one; its exit code and stderr.
fn rank(l: &Layout, extra: &[&str]) -> (Option<i32>, String) {
    // MPI's session files in a dir of its own: OpenMPI processes started
    // at once race creating /tmp/ompi.<host>.<uid> ("File exists").
    let mpi_tmp = tempfile::tempdir().expect("a temp dir for MPI's session files");
    let out = std::process::Command::new(BIN)
        .args(["rank", "--graph-name", "g", "--threads", "1"])
        .args(["--part-method", "random", "--input"])
        .arg(l.meta())
        .arg("--out")
        .arg(l.out())
        .args(extra)
        .env_remove("DGL_OPERATOR_WORKER_INDEX")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("TMPDIR", mpi_tmp.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

/// Every driver refuses `edit`'s metadata naming `field` in its message,
/// and nothing outside the output folder changes.
fn refused_everywhere(edit: impl Fn(&mut Value), field: &str) {
    let l = Layout::new(&edit);
    let before = l.listing();
    let err = single_process(&l).expect_err("the single process refuses it");
    assert_eq!(
        l.listing(),
        before,
        "single process: nothing changes outside"
    );
    let text = err.to_string();
    assert!(text.contains(field), "{text}");
    assert!(!text.contains("escape"), "does not echo the name: {text}");
    for extra in [&[][..], &["--gather-structure"][..]] {
        let (code, err) = rank(&l, extra);
        assert_eq!(code, Some(1), "rank {extra:?}: {err}");
        assert!(err.contains(field), "rank {extra:?}: {err}");
        assert_eq!(l.listing(), before, "rank {extra:?}: nothing changes");
    }
}

#[test]
fn a_node_type_that_is_a_path_creates_nothing_outside_the_output() {
    refused_everywhere(rename_ntype(EVIL), "node_type[0]");
    refused_everywhere(rename_ntype(".."), "node_type[0]");
}

#[test]
fn a_relation_feature_or_graph_name_that_is_a_path_is_refused() {
    let rel = |v: &mut Value| {
        let canonical = format!("_N:{EVIL}:_N");
        v["edge_type"] = json!([canonical]);
        let edges = v["edges"]["_N:_E:_N"].take();
        v["edges"] = json!({ canonical.clone(): edges });
        let ed = v["edge_data"]["_N:_E:_N"].take();
        v["edge_data"] = json!({ canonical: ed });
    };
    refused_everywhere(rel, "edge_type[0]");
    let feature = |v: &mut Value| {
        let f = v["node_data"]["_N"]["feat"].take();
        v["node_data"]["_N"] = json!({ "../../../escape": f });
    };
    refused_everywhere(feature, "node_data._N, a feature's name");
    refused_everywhere(|v| v["graph_name"] = json!("../escape"), "graph_name");
    refused_everywhere(|v| v["graph_name"] = json!("a\0b"), "graph_name");
}

/// The assignment's reader never opens `<dir>/../escape.txt` and its
/// writer never creates it, whatever graph a library user passes.
#[test]
fn the_assignment_files_are_never_named_by_a_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("assignment");
    let mut g = homogeneous();
    let a = Assignment {
        num_parts: 2,
        parts: vec![0; 40],
        algo_name: "random".into(),
    };
    write_files(&a, &g, &dir).unwrap();
    // A valid assignment outside, where the name points.
    let outside = tmp.path().join("escape.txt");
    std::fs::copy(dir.join("_N.txt"), &outside).unwrap();
    g.ntypes[0].name = "../escape".into();
    assert_error(read_files(&dir, &g, Some(2)), &["node type 0", "'/'"]);

    std::fs::remove_file(&outside).unwrap();
    let before = listing(tmp.path(), &dir);
    let e = write_files(&a, &g, &dir);
    assert_error(
        e,
        &["node type 0", "expected a name usable as one file name"],
    );
    assert_eq!(listing(tmp.path(), &dir), before, "nothing written outside");
}
