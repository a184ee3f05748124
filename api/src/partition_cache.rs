//! The partition cache's lookup answer (`spec.partitionCache`): one line,
//! `hit <key>` or `miss <key>` (the key: 64 lowercase hex digits). dglrun's
//! lookup writes it as its container's termination message, which the
//! operator reads from the launcher pod's status ([`of_pod`]), and into the
//! launcher's state folder for the launcher itself.

use k8s_openapi::api::core::v1::Pod;

use crate::names::CACHE_LOOKUP_CONTAINER;

/// What the lookup found for the job's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// An entry with a manifest is there: no partitioning.
    pub hit: bool,
    /// The job's key.
    pub key: String,
}

impl Lookup {
    /// The one line written.
    pub fn render(&self) -> String {
        let word = if self.hit { "hit" } else { "miss" };
        format!("{word} {}\n", self.key)
    }

    /// Reads [`Lookup::render`]'s line; anything else is an error naming
    /// what was expected (the text is not echoed: it is a file's bytes).
    pub fn parse(text: &str) -> Result<Lookup, String> {
        let mut words = text.split_whitespace();
        let hit = match words.next() {
            Some("hit") => true,
            Some("miss") => false,
            _ => return Err("expected `hit <key>` or `miss <key>`".into()),
        };
        let key = words.next().unwrap_or_default();
        if key.len() != 64 || !key.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err("the key is not 64 lowercase hex digits".into());
        }
        if words.next().is_some() {
            return Err("more than `hit|miss <key>` on the line".into());
        }
        Ok(Lookup {
            hit,
            key: key.to_string(),
        })
    }
}

/// The answer of the pod's lookup container once it exited 0 with a
/// well-formed message; `None` while it runs, and when it failed (the pod's
/// failure is read as any other's).
pub fn of_pod(pod: &Pod) -> Option<Lookup> {
    let status = pod.status.as_ref()?;
    let c = status
        .init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == CACHE_LOOKUP_CONTAINER)?;
    let t = c.state.as_ref()?.terminated.as_ref()?;
    if t.exit_code != 0 {
        return None;
    }
    Lookup::parse(t.message.as_deref()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn pod(exit_code: i32, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![ContainerStatus {
                    name: CACHE_LOOKUP_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code,
                            message: Some(message.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_rendered_answer_reads_back() {
        for hit in [true, false] {
            let l = Lookup {
                hit,
                key: KEY.into(),
            };
            assert_eq!(Lookup::parse(&l.render()), Ok(l));
        }
    }

    #[test]
    fn malformed_answers_are_refused() {
        for bad in [
            "",
            "hit",
            "found 0123",
            &format!("hit {}", &KEY[1..]),
            &format!("hit {}", KEY.to_uppercase()),
            &format!("miss {KEY} extra"),
        ] {
            assert!(Lookup::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_pod_answers_only_once_its_lookup_exited_0() {
        let hit = of_pod(&pod(0, &format!("hit {KEY}\n")));
        assert_eq!(hit.map(|l| l.hit), Some(true));
        assert_eq!(of_pod(&pod(1, &format!("hit {KEY}"))), None);
        assert_eq!(of_pod(&pod(0, "garbage")), None);
        assert_eq!(of_pod(&Pod::default()), None);
    }
}
