//! A job on its way: the partitioner, the workers and the launcher
//! created, the partitions awaited, the run launched.

use dgl_api::names::{partitioner_name, worker_name};
use dgl_api::{JobPhase, PartitionMode, WorkerCreationPolicy};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::{find, Plan, Planner, Replicas, Step};
use crate::pure::builders;
use crate::pure::observe::{ObservedPod, PodState};
use crate::pure::settings::BuildConfig;
use crate::pure::validate::ValidJob;

impl<'a> Planner<'a> {
    /// Forward: the partitioner, the workers and the launcher at once (the
    /// workers once the partitions are made under `AfterPartitioning`); the
    /// launch once the partitions are made and every worker is Ready with
    /// an IP. A pod that cannot start is named, and fails the job after
    /// runPolicy.podStartTimeoutSeconds (`starting.rs`).
    pub(super) fn forward(
        mut self,
        current: &[&ObservedPod],
        valid: &ValidJob<'_>,
        cfg: &BuildConfig,
    ) -> Plan {
        if let Some(message) = self.watch_starts(current) {
            return self.start_timed_out(current, &message);
        }
        // Every pod starts at once: images pull and preflights run while
        // the graph is partitioned. None reads a shard before the launcher
        // asks, and the launcher trains only once the ConfigMap launches
        // its run (written below), which needs the partitions made and
        // every worker Ready with its IP.
        let partitioned = self.partition(current, valid, cfg);
        let early = self.job.spec.worker_creation_policy() == WorkerCreationPolicy::AtStartup;
        // `workers` creates the missing ones: not while AfterPartitioning waits.
        let workers_ready = (early || partitioned) && self.workers(current, valid, cfg);
        let launch = workers_ready && partitioned;
        match find(current, &self.launcher) {
            None => self.create(builders::launcher_pod(valid, self.epoch, cfg)),
            // Running before the launch would be a pod that skipped its
            // watcher-loop: not the job running.
            Some(p) if launch && matches!(p.state, PodState::Running { .. }) => {
                self.launcher_running(p)
            }
            _ => {}
        }
        // Without workers the launcher trains alone: nothing to launch.
        if launch && !self.job.spec.is_standalone() {
            self.launch = Some(self.epoch);
        }
        self.done(Replicas::After(current), true)
    }

    /// The launcher runs: so does the job, once the graph is partitioned.
    fn launcher_running(&mut self, launcher: &ObservedPod) {
        if self.workers_partitioned(launcher) {
            let message = format!("DGLJob {} is running.", self.name);
            self.sb.clear(JobPhase::Restarting, "JobRunning", &message);
            self.sb.set(JobPhase::Running, "JobRunning", &message);
        }
    }

    /// DistParMETIS: the running launcher drives the workers' partitioning
    /// and turns Ready when it is done (`dglrun probe --partitioned`); until
    /// then the job is Partitioning, not Running. Other modes: always true.
    fn workers_partitioned(&mut self, launcher: &ObservedPod) -> bool {
        if self.job.spec.partition_mode != PartitionMode::DistParMetis {
            return true;
        }
        // A cache hit: no rank runs, and `cache_lookup` said Partitioned.
        if launcher.reuses_partitions() {
            return true;
        }
        if launcher.is_ready() {
            self.mark_partitioned();
            return true;
        }
        if !self.sb.is_true(JobPhase::Partitioned) {
            let message = format!(
                "The worker pods of DGLJob {} are partitioning the graph (DistParMETIS).",
                self.name
            );
            self.sb
                .set(JobPhase::Partitioning, "JobPartitioning", &message);
        }
        false
    }

    /// Partitioned, with Partitioning False beside it: a partition step
    /// that ended before any reconcile saw it running (the DistParMETIS
    /// ranks finish between two reconciles) still shows that it ran, so
    /// the conditions tell the same story however fast the step was.
    fn mark_partitioned(&mut self) {
        let message = "The graph is partitioned.";
        let unseen = self.sb.condition(JobPhase::Partitioning.into()).is_none();
        if unseen && !self.sb.is_true(JobPhase::Partitioned) {
            self.sb
                .set(JobPhase::Partitioning, "JobPartitioning", message);
        }
        self.sb
            .clear(JobPhase::Partitioning, "JobPartitioned", message);
        self.sb
            .set(JobPhase::Partitioned, "JobPartitioned", message);
    }

    /// Creates the partitioner if missing; true once it serves the shards
    /// (Ready), and always in a mode without one (DistParMETIS: once the
    /// cache's lookup answered, if the job has a cache). One that exited 0 before
    /// this run trained is deleted to be made again (see [`ended_early`]).
    fn partition(
        &mut self,
        current: &[&ObservedPod],
        valid: &ValidJob<'_>,
        cfg: &BuildConfig,
    ) -> bool {
        if self.job.spec.partition_mode == PartitionMode::DistParMetis {
            // The launcher's ranks partition once it is launched; with a
            // cache, not before its lookup answered, and on a hit never.
            return !matches!(self.cache_lookup(current), Lookup::Pending);
        }
        if !self.job.spec.has_partitioner() {
            return true;
        }
        match self.cache_lookup(current) {
            Lookup::Pending => return false,
            Lookup::Hit => return true,
            Lookup::Miss | Lookup::NoCache => {}
        }
        let training = self.training_started(current);
        let partitioned = match find(current, &partitioner_name(&self.name)) {
            Some(p) if ended_early(p, training) => {
                self.steps.push(Step::DeletePod(p.name.clone()));
                false
            }
            Some(p) => p.is_ready() || p.state == PodState::Succeeded,
            None => {
                self.create(builders::partitioner_pod(valid, self.epoch, cfg));
                false
            }
        };
        if partitioned {
            self.mark_partitioned();
        } else if !self.sb.is_true(JobPhase::Partitioned) {
            let message = format!(
                "The partitioner pod of DGLJob {} is partitioning the graph.",
                self.name
            );
            self.sb
                .set(JobPhase::Partitioning, "JobPartitioning", &message);
        }
        partitioned
    }

    /// `spec.partitionCache`: what the current launcher's lookup found.
    /// Until it answers no partitioner is made and no run launched
    /// (Partitioning says so); a hit is the job Partitioned, with the entry
    /// named and no partitioner (nor, in DistParMETIS, any rank).
    fn cache_lookup(&mut self, current: &[&ObservedPod]) -> Lookup {
        let Some(cache) = &self.job.spec.partition_cache else {
            return Lookup::NoCache;
        };
        let found = find(current, &self.launcher).and_then(|l| l.cache_lookup.clone());
        let Some(found) = found else {
            if !self.sb.is_true(JobPhase::Partitioned) {
                let message = format!(
                    "The launcher of DGLJob {} is looking the partitions up in the partition cache {}.",
                    self.name, cache.url
                );
                self.sb
                    .set(JobPhase::Partitioning, "PartitionCacheLookup", &message);
            }
            return Lookup::Pending;
        };
        if !found.hit {
            return Lookup::Miss;
        }
        let message = format!(
            "The partitions were reused from the partition cache {} (entry {}): no {} ran; each worker downloads its own part.",
            cache.url,
            found.key,
            match self.job.spec.partition_mode {
                PartitionMode::DistParMetis => "partition rank",
                _ => "partitioner",
            }
        );
        if self.sb.condition(JobPhase::Partitioning.into()).is_none() {
            self.sb
                .set(JobPhase::Partitioning, "PartitionsReused", &message);
        }
        self.sb
            .clear(JobPhase::Partitioning, "PartitionsReused", &message);
        self.sb
            .set(JobPhase::Partitioned, "PartitionsReused", &message);
        Lookup::Hit
    }

    /// Creates missing workers; true when every worker is Ready with an IP.
    fn workers(
        &mut self,
        current: &[&ObservedPod],
        valid: &ValidJob<'_>,
        cfg: &BuildConfig,
    ) -> bool {
        let mut ready = true;
        for i in 0..self.job.spec.num_workers() {
            match find(current, &worker_name(&self.name, i)) {
                Some(p) => ready &= p.is_ready() && p.ip.is_some(),
                None => {
                    self.create(builders::worker_pod(valid, i, self.epoch, cfg));
                    ready = false;
                }
            }
        }
        ready
    }

    /// Creates `pod` unless a pod of that name still exists: one being
    /// deleted (an earlier run) blocks the new one, and its deletion event
    /// brings the job back.
    fn create(&mut self, pod: Pod) {
        let name = pod.name_any();
        if !self.pods.iter().any(|p| p.name == name) {
            self.steps.push(Step::CreatePod(Box::new(pod)));
        }
    }
}

/// The partition cache's answer, as the forward planning reads it.
enum Lookup {
    /// No `spec.partitionCache`.
    NoCache,
    /// The launcher's lookup has not answered yet.
    Pending,
    Hit,
    Miss,
}

/// Whether the partitioner `p` exited 0 (it serves no more) before the
/// current run trained. It exits 0 when a launcher tells it the training
/// succeeded, or on SIGTERM; during a run that is the end of the job (left
/// alone), before it an earlier run's launcher that kept training where
/// the operator could not stop it (a node that stopped answering): the
/// restarted run would wait for it for ever.
fn ended_early(p: &ObservedPod, training: bool) -> bool {
    p.state == PodState::Succeeded && !training
}
