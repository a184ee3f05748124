//! The dglrun path: what the launcher does to ship shards, and the
//! machine's busy CPU over a transfer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use dgl_api::wire::{Request, Response, ShardReport, ShardRequest, ShardSource};
use dglrun::net::channel::{Channel, Token};

use super::common::*;

pub(super) fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    // One thread: every socket is created on this (namespaced) thread.
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Whether every agent answers an authenticated ping.
pub(super) fn ping_all(addrs: &[SocketAddr], token: &Token) -> Result<bool> {
    current_thread_runtime()?.block_on(async {
        for &addr in addrs {
            let ping = async {
                let mut ch = Channel::connect(addr, token, Duration::from_secs(2)).await?;
                ch.call::<_, Response>(&Request::Ping).await
            };
            match tokio::time::timeout(Duration::from_secs(3), ping).await {
                Ok(Ok(Response::Pong(_))) => {}
                Ok(Ok(other)) => bail!("{addr} answered a ping with {other:?}"),
                Ok(Err(e)) if !e.is_transient() => bail!("{addr}: {e}"),
                _ => return Ok(false),
            }
        }
        Ok(true)
    })
}

/// Connects to the partitioner, gets its manifest and asks for its largest
/// file: the seconds until the file's first byte arrives (its first chunk
/// is hashed on demand, nothing else is).
pub(super) fn first_byte(partitioner: SocketAddr, token: &Token) -> Result<f64> {
    current_thread_runtime()?.block_on(async {
        let started = Instant::now();
        let mut ch = Channel::connect(partitioner, token, Duration::from_secs(10)).await?;
        let Response::Manifest(m) = ch.call::<_, Response>(&Request::GetManifest).await? else {
            bail!("the partitioner did not send its manifest");
        };
        let big = m
            .files
            .iter()
            .max_by_key(|f| f.size)
            .ok_or_else(|| anyhow!("empty manifest"))?;
        let req = Request::Fetch {
            path: big.path.clone(),
            offset: 0,
        };
        let Response::File(_) = ch.call::<_, Response>(&req).await? else {
            bail!("the partitioner did not send {}", big.path);
        };
        let mut one = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(ch.reader.get_mut(), &mut one).await?;
        Ok(started.elapsed().as_secs_f64())
    })
}

/// The launcher's shard step: `PrepareShard` to every worker at once; the
/// time until the last `ShardReady`.
pub(super) fn prepare_shards(
    workers: &[(u32, SocketAddr)],
    partitioner: SocketAddr,
    n: u32,
    token: &Token,
    timeout: Duration,
) -> Result<(f64, Vec<ShardReport>)> {
    current_thread_runtime()?.block_on(async {
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for &(i, addr) in workers {
            let req = Request::PrepareShard(ShardRequest {
                graph_name: GRAPH.into(),
                part_id: i,
                num_parts: n,
                source: ShardSource::Partitioner {
                    addr: partitioner.to_string(),
                },
                use_graphbolt: false,
            });
            let token = token.clone();
            set.spawn(async move {
                let r = async {
                    let mut ch = Channel::connect(addr, &token, Duration::from_secs(10)).await?;
                    ch.send(&req).await?;
                    // Progress reports come every 2 s until the answer.
                    loop {
                        match ch.expect::<Response>().await? {
                            Response::ShardProgress(_) => continue,
                            other => break Ok::<_, dglrun::net::channel::ChannelError>(other),
                        }
                    }
                }
                .await;
                (i, r)
            });
        }
        let mut reports = vec![None; workers.len()];
        let collect = async {
            while let Some(joined) = set.join_next().await {
                let (i, r) = joined.expect("shard tasks do not panic");
                match r {
                    Ok(Response::ShardReady(rep)) => reports[i as usize] = Some(rep),
                    Ok(Response::Error { message }) => bail!("worker {i}: {message}"),
                    Ok(other) => bail!("worker {i}: unexpected reply {other:?}"),
                    Err(e) => bail!("worker {i}: {e}"),
                }
            }
            Ok(())
        };
        tokio::time::timeout(timeout, collect)
            .await
            .map_err(|_| anyhow!("the shards were not ready within {timeout:?}"))??;
        let secs = started.elapsed().as_secs_f64();
        Ok((
            secs,
            reports
                .into_iter()
                .map(|r| r.expect("every worker answered"))
                .collect(),
        ))
    })
}

/// Busy CPU seconds of the whole machine since boot: user, nice, system,
/// irq and softirq of the `cpu` line of /proc/stat (guest time is already
/// in user; steal is the hypervisor's, not ours).
pub(super) fn machine_busy() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("/proc/stat has no cpu line"))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse::<u64>())
        .collect::<Result<_, _>>()
        .context("/proc/stat: cpu line")?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let busy: u64 = ticks
        .iter()
        .take(7)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(busy as f64 / hz)
}
