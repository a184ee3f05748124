//! Which pods to wait for: names from a file, or a label selector.

use std::collections::BTreeSet;
use std::path::Path;

use dgl_api::files;

use crate::Error;

/// The pods a run waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// These pods, by name (each watched with `metadata.name=<pod>`, which a
    /// Role restricted by `resourceNames` allows).
    Pods(Vec<String>),
    /// Every pod the label selector matches, at least `min_pods` of them
    /// (one watch; needs list/watch on pods without resourceNames).
    Selector { selector: String, min_pods: usize },
}

impl Targets {
    /// Pods named in a file: the operator's hostfile / partfile / leadfile
    /// (`<ip> <port> <pod> [slots=<n>]`, pod in field 3) or one bare name per
    /// line; blank lines and `#` comments are skipped. Duplicates count once.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let content = std::fs::read_to_string(path).map_err(|source| Error::ReadFile {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_content(&path.display().to_string(), &content)
    }

    /// [`Targets::from_file`] on content already read; `file` names it in errors.
    pub fn from_content(file: &str, content: &str) -> Result<Self, Error> {
        let names = files::pod_names(file, content)?;
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for name in names {
            if let Err(why) = validate_pod_name(&name) {
                return Err(Error::InvalidTargets(format!(
                    "{file}: {name:?} is not a valid pod name: {why}"
                )));
            }
            if seen.insert(name.clone()) {
                out.push(name);
            }
        }
        if out.is_empty() {
            return Err(Error::InvalidTargets(format!(
                "{file}: lists no pods (expected `<ip> <port> <pod> [slots=<n>]` or one pod name per line)"
            )));
        }
        Ok(Targets::Pods(out))
    }

    /// Pods by name, checked.
    pub fn pods<I, S>(names: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let content: String = names.iter().map(|n| format!("{n}\n")).collect();
        if names
            .iter()
            .any(|n| n.trim().is_empty() || n.contains(char::is_whitespace))
        {
            return Err(Error::InvalidTargets(format!(
                "pod names must be non-empty and without spaces: {names:?}"
            )));
        }
        Self::from_content("pod list", &content)
    }

    /// Pods by label selector (checked for emptiness only; the API server
    /// validates the syntax and its message is reported as is).
    pub fn selector(selector: &str, min_pods: usize) -> Result<Self, Error> {
        let selector = selector.trim();
        if selector.is_empty() {
            return Err(Error::InvalidTargets(
                "the label selector is empty (it would match every pod in the namespace)".into(),
            ));
        }
        Ok(Targets::Selector {
            selector: selector.to_string(),
            min_pods: min_pods.max(1),
        })
    }

    /// For pods that are all workers of one job as the operator names and
    /// labels them (`<job>-worker-<i>`): the label selector of that job's
    /// workers, so that one watch sees them all (a job of 1,000 workers
    /// would otherwise open 1,000 watches, each a connection).
    pub fn workers_selector(&self) -> Option<String> {
        let Targets::Pods(names) = self else {
            return None;
        };
        let mut job = None;
        for name in names {
            let (j, index) = name.rsplit_once("-worker-")?;
            let numeric = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
            if !numeric || job.is_some_and(|k| k != j) {
                return None;
            }
            job = Some(j);
        }
        // A label value: at most 63 characters (a job name is a DNS label).
        let job = job.filter(|j| !j.is_empty() && j.len() <= 63)?;
        Some(format!(
            "{}={job},{}=worker",
            dgl_api::names::LABEL_JOB_NAME,
            dgl_api::names::LABEL_REPLICA_TYPE
        ))
    }

    /// One line for logs.
    pub fn describe(&self) -> String {
        match self {
            Targets::Pods(names) => format!("pods {}", names.join(", ")),
            Targets::Selector { selector, min_pods } => {
                format!("pods matching {selector:?} (at least {min_pods})")
            }
        }
    }
}

/// A pod name is a DNS-1123 subdomain: at most 253 characters of lowercase
/// alphanumerics, `-` and `.`, starting and ending alphanumeric.
pub fn validate_pod_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".into());
    }
    if name.len() > 253 {
        return Err(format!(
            "it has {} characters, at most 253 are allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Err(format!(
            "{c:?} is not allowed (lowercase letters, digits, `-` and `.` only)"
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err("it must start and end with a letter or digit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgl_api::files::{render_hosts, HostLine};

    #[test]
    fn reads_the_operators_hostfile_and_partfile() {
        let lines: Vec<HostLine> = (0..3)
            .map(|i| HostLine {
                ip: if i == 1 {
                    None
                } else {
                    Some(format!("10.0.0.{i}").parse().unwrap())
                },
                port: 30050,
                pod: dgl_api::names::worker_name("job", i),
                slots: Some(1),
            })
            .collect();
        let hostfile = render_hosts(&lines);
        assert_eq!(
            Targets::from_content("hostfile", &hostfile).unwrap(),
            Targets::Pods(vec![
                "job-worker-0".into(),
                "job-worker-1".into(),
                "job-worker-2".into()
            ])
        );
        let partfile = "- 30050 job-partitioner\n";
        assert_eq!(
            Targets::from_content("partfile", partfile).unwrap(),
            Targets::Pods(vec!["job-partitioner".into()])
        );
    }

    #[test]
    fn one_jobs_workers_share_a_selector_others_do_not() {
        let t = Targets::from_content("f", "a-worker-1-worker-0\na-worker-1-worker-12\n").unwrap();
        assert_eq!(
            t.workers_selector().as_deref(),
            Some("dgloperator.io/job-name=a-worker-1,dgloperator.io/replica-type=worker")
        );
        for other in [
            "j-worker-0\nk-worker-1\n",
            "j-worker-0\nj-partitioner\n",
            "j-worker-x\n",
        ] {
            let t = Targets::from_content("f", other).unwrap();
            assert_eq!(t.workers_selector(), None, "{other}");
        }
    }

    #[test]
    fn reads_bare_names_and_dedups() {
        let t = Targets::from_content("f", "# pods\na\n\nb\na\n").unwrap();
        assert_eq!(t, Targets::Pods(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn file_errors_name_the_file() {
        let e = Targets::from_content("/etc/dgl/hostfile", "a b\n").unwrap_err();
        assert!(e.to_string().contains("/etc/dgl/hostfile: line 1"), "{e}");
        let e = Targets::from_content("/etc/dgl/hostfile", "\n# nothing\n").unwrap_err();
        assert!(
            e.to_string().contains("/etc/dgl/hostfile: lists no pods"),
            "{e}"
        );
        let e = Targets::from_content("/etc/dgl/hostfile", "1.2.3.4 1 Bad_Name\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("\"Bad_Name\" is not a valid pod name"),
            "{e}"
        );
        let e = Targets::from_file(Path::new("/nonexistent/watcherfile")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/watcherfile"), "{e}");
    }

    #[test]
    fn validates_names_and_selectors() {
        assert!(validate_pod_name("job-worker-10").is_ok());
        assert!(validate_pod_name("a.b").is_ok());
        assert!(validate_pod_name("-a").is_err());
        assert!(validate_pod_name("a-").is_err());
        assert!(validate_pod_name(&"a".repeat(254)).is_err());
        assert!(Targets::pods(["ok", "has space"]).is_err());
        assert!(Targets::pods(Vec::<String>::new()).is_err());
        assert!(Targets::selector("  ", 1).is_err());
        assert_eq!(
            Targets::selector("app=x", 0).unwrap(),
            Targets::Selector {
                selector: "app=x".into(),
                min_pods: 1
            }
        );
    }
}
