//! The ConfigMap step: wait until the job's ConfigMap launches this run,
//! then write its keys as files for the launcher.
//!
//! The launcher is created with the workers, before the operator knows their
//! IPs; the operator writes them into the ConfigMap with key
//! [`CONFIG_RUN`] = the run once that run may launch. A ConfigMap volume
//! would show that only after the kubelet's next sync (up to a minute), so
//! the ConfigMap is watched through the API and its files written here.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use dgl_api::names::CONFIG_RUN;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::{deadline_sleep, format_duration, validate_pod_name, watch_failed, Error, Options};

/// Mode of the written files: the launcher may run as another user.
const FILE_MODE: u32 = 0o644;

/// Waits until the ConfigMap `name` in `namespace` holds key [`CONFIG_RUN`]
/// equal to `run` (the operator wrote that run's launch) and returns its
/// `data`. A ConfigMap that does not exist yet, or holds no run or another
/// run, is waited for; one deleted after it was seen ends the wait
/// ([`Error::ConfigMapDeleted`]). One watch with the field selector
/// `metadata.name=<name>`, so a Role with `resourceNames: [<name>]` suffices.
/// `options` as in [`crate::run_with`]: the timeout counts from
/// `options.since` (share it with the pod wait that follows).
pub async fn wait_config_map(
    client: Client,
    namespace: &str,
    name: &str,
    run: u32,
    options: Options,
) -> Result<BTreeMap<String, String>, Error> {
    validate_pod_name(name).map_err(|why| {
        Error::InvalidTargets(format!("{name:?} is not a valid ConfigMap name: {why}"))
    })?;
    let started = Instant::now();
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    let target = format!("ConfigMap {name}");
    tracing::info!(
        namespace,
        config_map = name,
        run,
        timeout = %options.timeout.map(format_duration).unwrap_or_else(|| "none".into()),
        "waiting for ConfigMap {name} to launch run {run}",
    );
    let expired = deadline_sleep(options.deadline(started));
    tokio::pin!(expired);
    let mut wait = ConfigWait::new(name, run);
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            () = &mut expired => return Err(wait.timed_out(options.timeout.unwrap_or_default())),
        };
        let Some(event) = item else {
            return Err(Error::WatchEnded { target });
        };
        match event {
            Ok(event) => {
                if let Some(data) = wait.apply(event)? {
                    return Ok(data);
                }
            }
            Err(e) => watch_failed(
                &e,
                namespace,
                target.clone(),
                started,
                options.forbidden_grace,
            )?,
        }
    }
}

/// What the ConfigMap shows, as far as the wait is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holds {
    /// Not seen (yet).
    Missing,
    /// Seen without key [`CONFIG_RUN`]: no run launched yet.
    NoRun,
    /// Seen with this [`CONFIG_RUN`] value (not ours).
    Run(String),
}

impl fmt::Display for Holds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holds::Missing => f.write_str("it does not exist yet"),
            Holds::NoRun => f.write_str("it holds no run yet"),
            Holds::Run(r) => write!(f, "it holds run {r}"),
        }
    }
}

/// The state of one ConfigMap wait, fed with the watch's events.
#[derive(Debug)]
pub(crate) struct ConfigWait {
    name: String,
    run: u32,
    holds: Holds,
    /// During a (re-)list: whether the ConfigMap was listed.
    listing: Option<bool>,
}

impl ConfigWait {
    pub(crate) fn new(name: &str, run: u32) -> Self {
        ConfigWait {
            name: name.to_string(),
            run,
            holds: Holds::Missing,
            listing: None,
        }
    }

    /// Applies one event: `Some(data)` once the ConfigMap holds our run.
    pub(crate) fn apply(
        &mut self,
        event: watcher::Event<ConfigMap>,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        match event {
            watcher::Event::Init => self.listing = Some(false),
            watcher::Event::InitApply(cm) => {
                self.listing = Some(true);
                return Ok(self.observe(cm));
            }
            watcher::Event::InitDone => {
                // A re-list without it: deleted while the watch was down.
                if self.listing.take() == Some(false) {
                    self.missing()?;
                }
            }
            watcher::Event::Apply(cm) => return Ok(self.observe(cm)),
            watcher::Event::Delete(_) => self.deleted()?,
        }
        Ok(None)
    }

    fn observe(&mut self, cm: ConfigMap) -> Option<BTreeMap<String, String>> {
        let data = cm.data.unwrap_or_default();
        let holds = match data.get(CONFIG_RUN) {
            Some(r) if *r == self.run.to_string() => {
                let (name, run) = (&self.name, self.run);
                tracing::info!(config_map = %name, run, "ConfigMap {name} launches run {run}");
                return Some(data);
            }
            Some(r) => Holds::Run(r.clone()),
            None => Holds::NoRun,
        };
        self.change(holds);
        None
    }

    /// Listed without the ConfigMap: still waited for unless it was seen.
    fn missing(&self) -> Result<(), Error> {
        if self.holds != Holds::Missing {
            return self.deleted();
        }
        self.log_waiting();
        Ok(())
    }

    fn deleted(&self) -> Result<(), Error> {
        tracing::error!(config_map = %self.name, "ConfigMap deleted");
        Err(Error::ConfigMapDeleted {
            name: self.name.clone(),
            run: self.run,
        })
    }

    /// Records what the ConfigMap holds, logged when it changed.
    fn change(&mut self, holds: Holds) {
        if holds != self.holds {
            self.holds = holds;
            self.log_waiting();
        }
    }

    fn log_waiting(&self) {
        let (name, run, holds) = (&self.name, self.run, &self.holds);
        tracing::info!(config_map = %name, run, "waiting for ConfigMap {name} to launch run {run} ({holds})");
    }

    pub(crate) fn timed_out(&self, after: std::time::Duration) -> Error {
        Error::ConfigMapTimeout {
            after,
            name: self.name.clone(),
            run: self.run,
            holds: self.holds.to_string(),
        }
    }
}

/// Writes each `data` key as the file `dir/<key>` (mode 0644) and returns
/// the paths written, in key order. Each file is written to a temporary file
/// in `dir` and renamed over the key's, so a reader sees the old file or the
/// new one, never half of one. Keys that are not plain file names (empty,
/// `.`, `..`, containing `/` or NUL) are refused before anything is written.
/// `dir` must exist.
pub fn write_config(dir: &Path, data: &BTreeMap<String, String>) -> Result<Vec<PathBuf>, Error> {
    if let Some((key, why)) = data
        .keys()
        .find_map(|k| validate_config_key(k).err().map(|why| (k, why)))
    {
        return Err(Error::BadConfigKey {
            key: key.clone(),
            dir: dir.display().to_string(),
            why,
        });
    }
    data.iter()
        .map(|(key, value)| write_atomically(&dir.join(key), dir, value))
        .collect()
}

/// `Err(why)` when `key` cannot be a file name directly in a folder.
fn validate_config_key(key: &str) -> Result<(), String> {
    match key {
        "" => Err("it is empty".into()),
        "." | ".." => Err("it names a folder".into()),
        _ if key.contains('/') => Err("it contains `/`".into()),
        _ if key.contains('\0') => Err("it contains NUL".into()),
        _ => Ok(()),
    }
}

fn write_atomically(path: &Path, dir: &Path, value: &str) -> Result<PathBuf, Error> {
    let failed = |source| Error::WriteConfig {
        path: path.display().to_string(),
        source,
    };
    // Hidden, unique, and short whatever the key's length (up to 253).
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".watcher-loop-{}-{n}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        // The umask may have narrowed the mode.
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        file.write_all(value.as_bytes())?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(failed(e));
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cm(pairs: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("j-config".into()),
                ..Default::default()
            },
            data: Some(data(pairs)),
            ..Default::default()
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_every_key_as_a_file_replacing_old_ones() {
        let dir = temp_dir("write");
        std::fs::write(dir.join("hostfile"), "old content, longer than the new\n").unwrap();
        let d = data(&[
            ("hostfile", "10.0.0.1 30050 j-worker-0 slots=1\n"),
            ("run", "1"),
        ]);
        let written = write_config(&dir, &d).unwrap();
        assert_eq!(written, vec![dir.join("hostfile"), dir.join("run")]);
        assert_eq!(
            std::fs::read_to_string(dir.join("hostfile")).unwrap(),
            "10.0.0.1 30050 j-worker-0 slots=1\n"
        );
        assert_eq!(std::fs::read_to_string(dir.join("run")).unwrap(), "1");
        let mode = std::fs::metadata(dir.join("run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // No temporary file left behind.
        assert_eq!(listing(&dir), vec!["hostfile", "run"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_that_are_not_file_names_are_refused_before_writing() {
        let dir = temp_dir("badkey");
        for bad in ["../evil", "a/b", ".", "..", ""] {
            let d = data(&[("hostfile", "x"), (bad, "y")]);
            let e = write_config(&dir, &d).unwrap_err();
            assert!(
                matches!(&e, Error::BadConfigKey { key, .. } if key == bad),
                "{e:?}"
            );
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
            assert_eq!(e.exit_code(), crate::EXIT_WRITE);
        }
        assert!(listing(&dir).is_empty(), "nothing written");
        // Dots inside a name are fine.
        write_config(&dir, &data(&[(".hidden", "1"), ("a..b", "2")])).unwrap();
        assert_eq!(listing(&dir), vec![".hidden", "a..b"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_the_file() {
        let parent = temp_dir("missing");
        let dir = parent.join("absent");
        let e = write_config(&dir, &data(&[("hostfile", "x")])).unwrap_err();
        assert!(matches!(e, Error::WriteConfig { .. }), "{e:?}");
        let message = e.to_string();
        assert!(
            message.contains(&dir.join("hostfile").display().to_string()),
            "{message}"
        );
        assert_eq!(e.exit_code(), crate::EXIT_WRITE);
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn long_keys_are_written() {
        let dir = temp_dir("longkey");
        let key = "k".repeat(253);
        write_config(&dir, &data(&[(&key, "v")])).unwrap();
        assert_eq!(listing(&dir), vec![key]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn waits_for_exactly_its_run() {
        let mut wait = ConfigWait::new("j-config", 1);
        assert_eq!(wait.apply(watcher::Event::Init).unwrap(), None);
        assert_eq!(wait.apply(watcher::Event::InitDone).unwrap(), None);
        assert_eq!(wait.holds, Holds::Missing, "not created yet is waited for");
        let e = wait.apply(watcher::Event::Apply(cm(&[("hostfile", "old")])));
        assert_eq!(e.unwrap(), None);
        assert_eq!(wait.holds, Holds::NoRun);
        let e = wait.apply(watcher::Event::Apply(cm(&[
            ("run", "0"),
            ("hostfile", "old"),
        ])));
        assert_eq!(e.unwrap(), None);
        assert_eq!(wait.holds, Holds::Run("0".into()));
        let e = wait.timed_out(std::time::Duration::from_secs(60));
        assert_eq!(
            e.to_string(),
            "timed out after 1m waiting for ConfigMap j-config to launch run 1; it holds run 0"
        );
        assert_eq!(e.exit_code(), crate::EXIT_TIMEOUT);
        for not_ours in ["10", "01", " 1"] {
            let e = wait.apply(watcher::Event::Apply(cm(&[("run", not_ours)])));
            assert_eq!(e.unwrap(), None, "{not_ours:?} is not run 1");
        }
        let ours = cm(&[("run", "1"), ("hostfile", "new")]);
        let got = wait.apply(watcher::Event::InitApply(ours)).unwrap();
        assert_eq!(got, Some(data(&[("run", "1"), ("hostfile", "new")])));
    }

    #[test]
    fn deletion_after_it_was_seen_ends_the_wait() {
        let mut wait = ConfigWait::new("j-config", 0);
        wait.apply(watcher::Event::Apply(cm(&[]))).unwrap();
        let e = wait
            .apply(watcher::Event::Delete(cm(&[])))
            .expect_err("deleted");
        assert_eq!(
            e.to_string(),
            "ConfigMap j-config was deleted while waiting for it to launch run 0 (the job is gone)"
        );
        assert_eq!(e.exit_code(), crate::EXIT_POD_FAILED);

        // Gone from a re-list (deleted while the watch was down).
        let mut wait = ConfigWait::new("j-config", 0);
        wait.apply(watcher::Event::InitApply(cm(&[("run", "7")])))
            .unwrap();
        wait.apply(watcher::Event::InitDone).unwrap();
        wait.apply(watcher::Event::Init).unwrap();
        let e = wait
            .apply(watcher::Event::InitDone)
            .expect_err("relisted without it");
        assert!(matches!(e, Error::ConfigMapDeleted { .. }), "{e:?}");
    }
}
