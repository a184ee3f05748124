//! The pipeline's settings as both binaries take them (`dglrun` in
//! partition modes ParMETIS and DistParMETIS, `dgl-partition rank`): the
//! choice of partitioner, where the chunked input is found by default and
//! how many threads run, stated once here.

use std::fmt;

use std::path::{Path, PathBuf};

use clap::builder::TypedValueParser;

use crate::config::Config;
use crate::input::Source;

/// The chunked graph's description file (DGL's name).
pub const CHUNKED_METADATA: &str = "metadata.json";

/// The workspace's folder of the chunked graph (dgl_api::names::CHUNKED_DIR;
/// restated because dgl-api brings kube into the rank program's build;
/// dglrun's tests check that the two agree).
pub const CHUNKED_DIR: &str = "chunked";

/// The workspace's folder of the partitions (dgl_api::names::DATASET_DIR,
/// restated and checked likewise).
pub const DATASET_DIR: &str = "dataset";

/// Each worker's workspace (dgl_api::names::WORKSPACE, restated and
/// checked likewise).
pub const WORKSPACE: &str = "/dgl_workspace";

/// The environment variable naming the worker a process runs on
/// (dgl_api::names::ENV_WORKER_INDEX, restated and checked likewise).
pub const ENV_WORKER_INDEX: &str = "DGL_OPERATOR_WORKER_INDEX";

/// The pipeline's settings as both binaries take them: `dglrun` (which
/// spells them `--partition-input`, `--partition-threads`,
/// `--partition-seed`) and `dgl-partition rank` (`--input`, `--threads`,
/// `--seed`); each accepts the other's spelling as an alias.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PartitionArgs {
    /// The chunked graph's metadata.json (or its folder), or its object in
    /// S3-compatible storage, s3://bucket/prefix/metadata.json (credentials,
    /// region and endpoint from the AWS_* environment variables); with
    /// DistParMETIS every worker must see the same graph (image, shared
    /// volume or bucket) [default: <workspace>/chunked/metadata.json].
    #[arg(
        long = "partition-input",
        alias = "input",
        env = "DGLRUN_PARTITION_INPUT",
        value_name = "PATH"
    )]
    pub input: Option<PathBuf>,
    /// Let metadata.json list files outside its folder (absolute paths
    /// elsewhere, `..`, symlinks leading out); only for trusted input.
    #[arg(long)]
    pub allow_input_outside: bool,
    /// How nodes are assigned to partitions: metis (multilevel k-way with
    /// the balance constraints of --balance-train / --balance-edges),
    /// random, or file (a DGL assignment: <ntype>.txt + partition_meta.json
    /// in --assignment-dir).
    /// (DGL's `part_method`.)
    #[arg(
        long,
        env = "DGLRUN_PART_METHOD",
        default_value = Choice::Metis.as_str(),
        value_parser = clap::builder::PossibleValuesParser::new(Choice::flag_values())
            .map(|v| Choice::from_flag(&v))
    )]
    pub part_method: Choice,
    /// Folder of the assignment files for --part-method file.
    #[arg(
        long,
        value_name = "DIR",
        required_if_eq("part_method", Choice::File(PathBuf::new()).as_str())
    )]
    pub assignment_dir: Option<PathBuf>,
    /// Threads of the pipeline [default: the CPUs this process may use,
    /// honouring the pod's CPU limit].
    #[arg(
        long = "partition-threads",
        alias = "threads",
        env = "DGLRUN_PARTITION_THREADS",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub threads: Option<u32>,
    /// Seed of the random choices (random partitioner, METIS).
    #[arg(
        long = "partition-seed",
        alias = "seed",
        value_name = "N",
        default_value_t = 0
    )]
    pub seed: u64,
}

impl PartitionArgs {
    /// The arguments that parse back to these settings, spelled as
    /// `dgl-partition rank` takes them (what dglrun passes through mpirun).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--part-method".to_string(),
            self.part_method.as_str().to_string(),
            "--seed".to_string(),
            self.seed.to_string(),
        ];
        if let Some(p) = &self.input {
            a.extend(["--input".to_string(), p.display().to_string()]);
        }
        if self.allow_input_outside {
            a.push("--allow-input-outside".to_string());
        }
        if let Some(d) = &self.assignment_dir {
            a.extend(["--assignment-dir".to_string(), d.display().to_string()]);
        }
        if let Some(t) = self.threads {
            a.extend(["--threads".to_string(), t.to_string()]);
        }
        a
    }

    /// The chunked input's metadata.json (see [`chunked_metadata`]).
    pub fn metadata(&self, workspace: &Path) -> PathBuf {
        chunked_metadata(self.input.as_deref(), workspace)
    }

    /// The chunked input (see [`chunked_metadata`]), confined to
    /// metadata.json's folder unless --allow-input-outside.
    pub fn chunked_source(&self, workspace: &Path) -> Source {
        let metadata = self.metadata(workspace);
        match self.allow_input_outside {
            true => Source::ChunkedAnywhere { metadata },
            false => Source::Chunked { metadata },
        }
    }

    /// A run's config: `source`, written into `out_dir` as `graph_name`,
    /// these settings' partitioner, threads and seed, no balance
    /// constraint (the caller adds its own), and the driver's own part.
    pub fn config<D>(
        &self,
        source: Source,
        out_dir: PathBuf,
        graph_name: &str,
        driver: D,
    ) -> Config<D> {
        Config {
            source,
            out_dir,
            graph_name: graph_name.to_string(),
            partitioner: self.choice(),
            balance_train: None,
            balance_edges: false,
            threads: self.threads(),
            seed: self.seed,
            driver,
        }
    }

    /// The partitioner chosen, `file` with its folder (clap requires
    /// --assignment-dir with `--part-method file`).
    pub fn choice(&self) -> Choice {
        match (&self.part_method, &self.assignment_dir) {
            (Choice::File(_), Some(dir)) => Choice::File(dir.clone()),
            (c, _) => c.clone(),
        }
    }

    /// The threads to run (see [`threads`]).
    pub fn threads(&self) -> usize {
        threads(self.threads)
    }
}

/// Which partitioner assigns the nodes, as users name it (DGL's
/// `part_method`): metis, random, or file (a DGL assignment folder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    Metis,
    Random,
    /// A user's assignment in DGL's format, in this folder (empty as
    /// `--part-method` parses it; [`PartitionArgs::choice`] fills it in).
    File(PathBuf),
}

impl Choice {
    /// Every method with its name, the one place either is spelled: the
    /// values of `--part-method` (DGL's `part_method`) in the order its
    /// help lists them, and the `algo_name` that metis and random write.
    const METHODS: [(Choice, &'static str); 3] = [
        (Choice::Metis, "metis"),
        (Choice::Random, "random"),
        (Choice::File(PathBuf::new()), "file"),
    ];

    /// The values `--part-method` takes.
    pub fn flag_values() -> impl Iterator<Item = &'static str> {
        Self::METHODS.into_iter().map(|(_, name)| name)
    }

    /// The flag value, as `--part-method` takes it.
    pub fn as_str(&self) -> &'static str {
        let kind = std::mem::discriminant(self);
        Self::METHODS
            .iter()
            .find(|(c, _)| std::mem::discriminant(c) == kind)
            .map_or("", |(_, name)| name)
    }

    /// The choice a flag value names (one of [`Self::flag_values`]; clap
    /// refuses any other before this runs, and `file` gets no folder yet).
    fn from_flag(value: &str) -> Choice {
        Self::METHODS
            .into_iter()
            .find(|(_, name)| *name == value)
            .map_or(Choice::Metis, |(c, _)| c)
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        match self {
            Choice::File(dir) => write!(f, " {}", dir.display()),
            _ => Ok(()),
        }
    }
}

/// metadata.json from `--input`/`--partition-input` (the file, or its
/// folder), by default `<workspace>/chunked/metadata.json` (which may not
/// exist yet: a loader writes it).
pub fn chunked_metadata(input: Option<&Path>, workspace: &Path) -> PathBuf {
    let object_prefix =
        |p: &Path| crate::input::is_object_url(p) && p.to_str().is_some_and(|s| s.ends_with('/'));
    match input {
        Some(p) if object_prefix(p) => PathBuf::from(format!("{}{CHUNKED_METADATA}", p.display())),
        Some(p) if p.is_dir() => p.join(CHUNKED_METADATA),
        Some(p) => p.to_path_buf(),
        None => workspace.join(CHUNKED_DIR).join(CHUNKED_METADATA),
    }
}

/// The threads asked for, by default the CPUs this process may use.
pub fn threads(requested: Option<u32>) -> usize {
    requested
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
}

/// Runs `f` on a pool of `threads` threads (the caller's pool when one
/// cannot be made).
pub(crate) fn with_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
    {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: PartitionArgs,
    }

    fn parse(args: &[String]) -> Result<PartitionArgs, clap::Error> {
        use clap::Parser;
        let argv = std::iter::once("t".to_string()).chain(args.iter().cloned());
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_render_parse_gives_the_same_settings() {
        let cases: &[&[&str]] = &[
            &[],
            &["--part-method", "random", "--partition-seed", "7"],
            &[
                "--input",
                "/g/metadata.json",
                "--threads",
                "3",
                "--seed",
                "9",
            ],
            &["--partition-input", "/g", "--partition-threads", "1"],
            &["--input", "/g", "--allow-input-outside"],
            &["--part-method", "file", "--assignment-dir", "/a b/c"],
            &["--seed", "18446744073709551615", "--part-method", "metis"],
        ];
        for case in cases {
            let first = parse(&strings(case)).unwrap();
            let rendered = first.to_args();
            assert_eq!(parse(&rendered).unwrap(), first, "{case:?} -> {rendered:?}");
        }
        assert_eq!(
            parse(&strings(&["--threads", "2", "--input", "/i"]))
                .unwrap()
                .to_args(),
            strings(&[
                "--part-method",
                "metis",
                "--seed",
                "0",
                "--input",
                "/i",
                "--threads",
                "2"
            ])
        );
    }

    #[test]
    fn bad_settings_are_refused_naming_the_flag() {
        let e = parse(&strings(&["--part-method", "file"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--assignment-dir"), "{e}");
        let e = parse(&strings(&["--threads", "0"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--partition-threads"), "{e}");
        let e = parse(&strings(&["--part-method", "parmetis"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metis, random, file"), "{e}");
    }

    #[test]
    fn every_choice_parses_back_from_its_flag_value() {
        for v in Choice::flag_values() {
            assert_eq!(Choice::from_flag(v).as_str(), v);
        }
        let file = parse(&strings(&[
            "--part-method",
            "file",
            "--assignment-dir",
            "/a",
        ]))
        .unwrap();
        assert_eq!(file.choice(), Choice::File(PathBuf::from("/a")));
        assert_eq!(file.choice().to_string(), "file /a");
        let metis = parse(&strings(&["--assignment-dir", "/a"])).unwrap();
        assert_eq!(metis.choice(), Choice::Metis);
    }

    #[test]
    fn the_input_defaults_to_the_workspace_and_a_folder_means_its_metadata() {
        let ws = Path::new("/ws");
        assert_eq!(
            chunked_metadata(None, ws),
            Path::new("/ws/chunked/metadata.json")
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            chunked_metadata(Some(dir.path()), ws),
            dir.path().join("metadata.json")
        );
        let file = Path::new("/nowhere/m.json");
        assert_eq!(chunked_metadata(Some(file), ws), file);
        // An object prefix (trailing slash) means its metadata.json.
        assert_eq!(
            chunked_metadata(Some(Path::new("s3://b/g/")), ws),
            Path::new("s3://b/g/metadata.json")
        );
        let object = Path::new("s3://b/g/metadata.json");
        assert_eq!(chunked_metadata(Some(object), ws), object);
        let args = parse(&strings(&["--input", "/nowhere/m.json"])).unwrap();
        assert_eq!(
            args.chunked_source(ws),
            Source::Chunked {
                metadata: file.to_path_buf()
            }
        );
        let anywhere = parse(&strings(&["--allow-input-outside"])).unwrap();
        assert_eq!(
            anywhere.chunked_source(ws),
            Source::ChunkedAnywhere {
                metadata: "/ws/chunked/metadata.json".into()
            }
        );
        assert_eq!(threads(Some(3)), 3);
        assert!(threads(None) >= 1);
    }
}
