//! Graphs and file helpers shared by the input tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use dgl_partition::model::{DType, EdgeType, InputGraph, NodeType, Tensor};
use serde_json::Value;

/// Deterministic pseudo-random numbers (a 64-bit LCG).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub fn tensor<T: Copy>(
    dtype: DType,
    shape: &[u64],
    values: &[T],
    to_le: impl Fn(T) -> Vec<u8>,
) -> Tensor {
    assert_eq!(shape.iter().product::<u64>() as usize, values.len());
    let data = values.iter().flat_map(|&v| to_le(v)).collect();
    Tensor {
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

pub fn f32s(shape: &[u64], seed: u64) -> Tensor {
    let n = shape.iter().product::<u64>();
    let v: Vec<f32> = (0..n).map(|i| (i * 7 + seed) as f32 * 0.5).collect();
    tensor(DType::F32, shape, &v, |x| x.to_le_bytes().to_vec())
}

pub fn edges(rng: &mut Lcg, m: u64, ns: u64, nd: u64) -> (Vec<u64>, Vec<u64>) {
    (0..m).map(|_| (rng.below(ns), rng.below(nd))).unzip()
}

/// `_N` with 40 nodes and features `feat` (f32 [40, 3]) and `label` (i64
/// [40]); `_N:_E:_N` with 150 edges and feature `w` (f64 [150]).
pub fn homogeneous() -> InputGraph {
    let mut rng = Lcg(7);
    let (src, dst) = edges(&mut rng, 150, 40, 40);
    let label: Vec<i64> = (0..40).map(|i| i % 5).collect();
    let w: Vec<f64> = (0..150).map(|i| i as f64 / 3.0).collect();
    let mut ndata = BTreeMap::new();
    ndata.insert("feat".to_string(), f32s(&[40, 3], 1));
    ndata.insert(
        "label".into(),
        tensor(DType::I64, &[40], &label, |x| x.to_le_bytes().to_vec()),
    );
    let mut edata = BTreeMap::new();
    edata.insert(
        "w".to_string(),
        tensor(DType::F64, &[150], &w, |x| x.to_le_bytes().to_vec()),
    );
    InputGraph {
        name: "homo".into(),
        ntypes: vec![NodeType {
            name: "_N".into(),
            count: 40,
            data: ndata,
            weights: None,
        }],
        etypes: vec![EdgeType {
            src_type: 0,
            rel: "_E".into(),
            dst_type: 0,
            src,
            dst,
            data: edata,
        }],
    }
}

/// author (25 nodes, `feat` f32 [25, 4]), paper (31 nodes, `emb` f32
/// [31, 2, 3], `year` i16 [31], `mask` bool [31]), field (3 nodes, none);
/// author:writes:paper (70, feature `w` f32 [70, 2]), paper:cites:paper
/// (90), paper:in:field (31), field:empty:author (0 edges).
pub fn heterogeneous() -> InputGraph {
    let mut rng = Lcg(11);
    let node = |name: &str, count: u64, data: Vec<(&str, Tensor)>| NodeType {
        name: name.into(),
        count,
        data: data.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        weights: None,
    };
    let year: Vec<i16> = (0..31).map(|i| 1990 + i as i16).collect();
    let mask: Vec<u8> = (0..31).map(|i| (i % 3 == 0) as u8).collect();
    let ntypes = vec![
        node("author", 25, vec![("feat", f32s(&[25, 4], 2))]),
        node(
            "paper",
            31,
            vec![
                ("emb", f32s(&[31, 2, 3], 3)),
                (
                    "year",
                    tensor(DType::I16, &[31], &year, |x| x.to_le_bytes().to_vec()),
                ),
                ("mask", tensor(DType::Bool, &[31], &mask, |x| vec![x])),
            ],
        ),
        node("field", 3, vec![]),
    ];
    let mut etype = |s: usize, rel: &str, d: usize, m: u64, data: Vec<(&str, Tensor)>| {
        let (src, dst) = edges(&mut rng, m, ntypes[s].count, ntypes[d].count);
        let data = data.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        EdgeType {
            src_type: s,
            rel: rel.into(),
            dst_type: d,
            src,
            dst,
            data,
        }
    };
    let etypes = vec![
        etype(0, "writes", 1, 70, vec![("w", f32s(&[70, 2], 4))]),
        etype(1, "cites", 1, 90, vec![]),
        etype(1, "in", 2, 31, vec![]),
        etype(2, "empty", 0, 0, vec![]),
    ];
    InputGraph {
        name: "hetero".into(),
        ntypes,
        etypes,
    }
}

pub fn load_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

pub fn save_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Edits metadata.json in place.
pub fn edit_metadata(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v = load_json(path);
    f(&mut v);
    save_json(path, &v);
}

/// The text of an error, asserting it mentions every piece.
pub fn assert_error<T: std::fmt::Debug>(r: dgl_partition::Result<T>, pieces: &[&str]) {
    let text = r.expect_err("expected an error").to_string();
    for p in pieces {
        assert!(text.contains(p), "error {text:?} should mention {p:?}");
    }
}

/// Whether a missing prerequisite (a Python module, root) fails a test
/// instead of skipping it: under CI (`CI=true`) and in the test command
/// (`cargo xtask test` sets `DGL_OPERATOR_TEST_STRICT=1`).
pub fn prerequisites_required() -> bool {
    let set = |k: &str, yes: &[&str]| std::env::var(k).is_ok_and(|v| yes.contains(&v.as_str()));
    set("CI", &["true", "1"]) || set("DGL_OPERATOR_TEST_STRICT", &["1"])
}

/// A test's prerequisite is missing: fails under CI and in the test
/// command, else prints why the test checks nothing (and the caller returns).
pub fn missing_prerequisite(why: &str) {
    assert!(
        !prerequisites_required(),
        "missing prerequisite (CI=true or DGL_OPERATOR_TEST_STRICT=1: a failure, not a skip): {why}"
    );
    eprintln!("SKIPPED (checks nothing): {why}");
}

/// `bin rank` (the `dgl-partition` binary) of the chunked graph at `url`
/// into `out`, logging at trace, as one worker outside a pod would run it;
/// the caller adds the environment it tests.
pub fn rank_command(bin: &str, url: &str, out: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.args([
        "rank",
        "--graph-name",
        "g",
        "--threads",
        "2",
        "--input",
        url,
    ])
    .arg("--out")
    .arg(out)
    .arg("--workspace")
    .arg(out)
    .env_remove("DGL_OPERATOR_WORKER_INDEX")
    .env("RUST_LOG", "trace");
    cmd
}

/// [`rank_command`] run with exactly the AWS variables `env` (any other
/// `AWS_*` of this process removed): success, all its output, how long
/// it ran.
pub fn rank_with_aws_env(
    bin: &str,
    env: &[(String, String)],
    url: &str,
) -> (bool, String, std::time::Duration) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = rank_command(bin, url, out.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let started = std::time::Instant::now();
    let o = cmd.output().unwrap();
    let took = started.elapsed();
    let (ok, text) = output_text(&o);
    (ok, text, took)
}

/// A finished command's exit status and all its output, stdout first.
pub fn output_text(o: &std::process::Output) -> (bool, String) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// The tests' one chunked-input configuration (METIS, train-mask balance,
/// 2 threads, seed 7) of `metadata` into `out`, for either driver.
pub fn chunked_config<D>(
    metadata: &Path,
    out: &Path,
    driver: D,
) -> dgl_partition::config::Config<D> {
    dgl_partition::config::Config {
        source: dgl_partition::input::Source::Chunked {
            metadata: metadata.to_path_buf(),
        },
        out_dir: out.to_path_buf(),
        graph_name: "g".into(),
        partitioner: dgl_partition::settings::Choice::Metis,
        balance_train: Some("train_mask".into()),
        balance_edges: false,
        threads: 2,
        seed: 7,
        driver,
    }
}

/// Every file below `dir` (relative path → bytes).
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}
