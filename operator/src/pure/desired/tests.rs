use super::*;
use crate::pure::plan::{self, Seen};
use crate::pure::settings::TokenKey;
use dgl_api::names::{config_name, secret_name, SECRET_TOKEN_KEY};
use dgl_api::{DGLJob, JobPhase, ReplicaType};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

fn seed() -> DGLJob {
    let mut job: DGLJob =
        serde_yaml::from_str(include_str!("../../../../examples/seed-dgljob.yaml")).unwrap();
    job.metadata.namespace = Some("ns".into());
    job.metadata.uid = Some("uid-1".into());
    job
}

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn planned<'a>(job: &'a DGLJob, cfg: &BuildConfig) -> Planned<'a> {
    plan::plan_job(job, Seen::pods(&[]), now(), cfg, None)
}

fn token(s: &Secret) -> Vec<u8> {
    s.data.as_ref().unwrap()[SECRET_TOKEN_KEY].0.clone()
}

#[test]
fn a_new_job_wants_every_child_the_settings_ask_for() {
    let j = seed();
    let cfg = BuildConfig {
        gang: Some(GangScheduler::Volcano),
        network_policy: true,
        token_key: Some(TokenKey(vec![7; 32])),
        ..Default::default()
    };
    let p = planned(&j, &cfg);
    let d = wanted(&p, &[], &cfg).expect("a new job's children are kept up to date");
    let (sa, role, binding) = builders::launcher_rbac(&d.valid);
    assert_eq!(d.service_account, sa);
    assert_eq!(d.role, role);
    assert_eq!(d.role_binding, binding);
    // Nothing launched yet: no ConfigMap write while workers start.
    assert!(d.config_map.is_none());
    let np = d.network_policy.as_ref().expect("NetworkPolicy on");
    let runs = AdmittedRuns {
        current: 0,
        kept_partitioner: None,
    };
    assert_eq!(np, &builders::network_policy(&d.valid, runs));
    let (group, gang) = d.pod_group.as_ref().expect("a gang scheduler");
    assert_eq!(*gang, GangScheduler::Volcano);
    assert_eq!(group.name_any(), j.name_any());
    // The derived token: the random one is never asked for.
    let secret = d.secret(|| panic!("no random token with a key"));
    assert_eq!(secret.name_any(), secret_name(&j.name_any()));
    let want = builders::job_token(cfg.token_key.as_ref().unwrap(), &j).unwrap();
    assert_eq!(token(&secret), want.into_bytes());
}

#[test]
fn without_settings_no_policy_no_group_and_a_random_token() {
    let j = seed();
    let cfg = BuildConfig::default();
    let d = wanted(&planned(&j, &cfg), &[], &cfg).unwrap();
    assert!(d.network_policy.is_none());
    assert!(d.pod_group.is_none());
    assert!(d.derived_secret.is_none());
    assert_eq!(
        token(&d.secret(|| "r".repeat(64))),
        "r".repeat(64).into_bytes()
    );
}

#[test]
fn the_config_map_is_written_at_a_launch_and_created_for_a_lone_launcher() {
    let j = seed();
    let cfg = BuildConfig::default();
    let mut p = planned(&j, &cfg);
    p.plan.launch = Some(0);
    let (cm, when) = wanted(&p, &[], &cfg).unwrap().config_map.unwrap();
    assert_eq!(when, ApplyWhen::Changed);
    assert_eq!(cm.name_any(), config_name(&j.name_any()));
    p.plan.launch = None;
    p.plan.reset_launch = true;
    let (_, when) = wanted(&p, &[], &cfg).unwrap().config_map.unwrap();
    assert_eq!(
        when,
        ApplyWhen::Changed,
        "a suspended job takes its launch back"
    );

    let mut alone = seed();
    alone.spec.dgl_replica_specs.remove(&ReplicaType::Worker);
    let p = planned(&alone, &cfg);
    let (_, when) = wanted(&p, &[], &cfg).unwrap().config_map.unwrap();
    assert_eq!(
        when,
        ApplyWhen::Missing,
        "created with the job, never rewritten"
    );
}

#[test]
fn a_finished_or_refused_job_wants_nothing_written() {
    let cfg = BuildConfig {
        protected_service_accounts: vec!["ns/operator".parse().unwrap()],
        ..Default::default()
    };
    let mut refused = seed();
    let spec = refused
        .spec
        .dgl_replica_specs
        .get_mut(&ReplicaType::Worker)
        .unwrap();
    spec.template
        .spec
        .get_or_insert_with(Default::default)
        .service_account_name = Some("operator".into());
    let p = planned(&refused, &cfg);
    assert!(p.valid.is_none(), "refused: never validated");
    assert_eq!(p.plan.status.phase, Some(JobPhase::Failed));
    assert!(wanted(&p, &[], &cfg).is_none());

    let mut finished = seed();
    finished.status = Some(plan::fail(&finished, &[], now(), "ObjectExists", "m").status);
    let p = planned(&finished, &cfg);
    assert!(p.valid.is_none(), "finished: not validated again");
    assert!(wanted(&p, &[], &cfg).is_none());
}
