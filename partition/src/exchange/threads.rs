//! A world of N ranks in one process, one thread each: the collectives of
//! MPI through a shared mailbox and a barrier, so that multi-rank runs are
//! testable (and measurable) without mpirun.
//!
//! Every collective is: each rank deposits its contribution, a barrier, each
//! rank takes what it needs, a barrier (so no deposit is overwritten before
//! everyone took it). A rank that returns an error or panics poisons the
//! barrier: the others' next collective fails naming it, as `MPI_Abort`
//! ends every rank.

use std::any::Any;
use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex};

use super::{check_buckets, check_root, exchange_error, Buckets, Elem, Exchange};
use crate::Result;

type Slot = Option<Arc<dyn Any + Send + Sync>>;

struct Hub {
    size: u32,
    slots: Mutex<Vec<Slot>>,
    gate: Mutex<Gate>,
    turn: Condvar,
}

#[derive(Default)]
struct Gate {
    waiting: u32,
    generation: u64,
    failed: Option<u32>,
}

impl Hub {
    /// Waits until every rank got here, or one failed.
    fn barrier(&self) -> Result<()> {
        let mut g = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = g.failed {
            return Err(failed(r));
        }
        g.waiting += 1;
        if g.waiting == self.size {
            g.waiting = 0;
            g.generation += 1;
            self.turn.notify_all();
            return Ok(());
        }
        let gen = g.generation;
        while g.generation == gen && g.failed.is_none() {
            g = self.turn.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        match g.failed {
            Some(r) if g.generation == gen => Err(failed(r)),
            _ => Ok(()),
        }
    }

    fn fail(&self, rank: u32) {
        let mut g = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        g.failed.get_or_insert(rank);
        self.turn.notify_all();
    }
}

fn failed(rank: u32) -> crate::Error {
    exchange_error(format!("rank {rank} failed; every rank ends"))
}

/// One rank of an in-process world (see the module docs).
pub struct Threads {
    hub: Arc<Hub>,
    rank: u32,
    transfers: Cell<u64>,
}

impl Threads {
    /// Runs `f` on `size` ranks, one thread each; returns every rank's
    /// result in rank order.
    pub fn run<T: Send>(size: u32, f: impl Fn(&Threads) -> Result<T> + Sync) -> Vec<Result<T>> {
        let hub = Arc::new(Hub {
            size: size.max(1),
            slots: Mutex::new(vec![None; size.max(1) as usize]),
            gate: Mutex::new(Gate::default()),
            turn: Condvar::new(),
        });
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..size.max(1))
                .map(|rank| {
                    let (hub, f) = (hub.clone(), &f);
                    s.spawn(move || {
                        let me = Threads {
                            hub: hub.clone(),
                            rank,
                            transfers: Cell::new(0),
                        };
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&me)));
                        let out = out.unwrap_or_else(|_| {
                            Err(exchange_error(format!("rank {rank} panicked")))
                        });
                        if out.is_err() {
                            hub.fail(rank);
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(exchange_error("a rank died".into())))
                })
                .collect()
        })
    }

    /// Deposits `mine`, waits for everyone, reads every deposit with
    /// `take`, waits again.
    fn round<M: Any + Send + Sync, R>(
        &self,
        mine: M,
        take: impl FnOnce(&[&M]) -> Result<R>,
    ) -> Result<R> {
        self.lock_slots()[self.rank as usize] = Some(Arc::new(mine));
        self.hub.barrier()?;
        let all: Vec<Arc<dyn Any + Send + Sync>> =
            self.lock_slots().iter().flatten().cloned().collect();
        let typed: Option<Vec<&M>> = all.iter().map(|a| a.downcast_ref::<M>()).collect();
        let out = match typed {
            Some(t) if t.len() == self.hub.size as usize => take(&t),
            _ => Err(exchange_error(
                "the ranks called different collectives".into(),
            )),
        };
        self.hub.barrier()?;
        self.lock_slots()[self.rank as usize] = None;
        self.transfers.set(self.transfers.get() + 1);
        out
    }

    fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.hub.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Exchange for Threads {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.hub.size
    }

    fn barrier(&self) -> Result<()> {
        self.hub.barrier()
    }

    fn allgather(&self, values: &[u64]) -> Result<Vec<u64>> {
        self.round(values.to_vec(), |all| {
            if all.iter().any(|v| v.len() != values.len()) {
                return Err(exchange_error(
                    "allgather: the ranks gave different counts".into(),
                ));
            }
            Ok(all.iter().flat_map(|v| v.iter().copied()).collect())
        })
    }

    fn broadcast<T: Elem>(&self, root: u32, data: &mut Vec<T>) -> Result<()> {
        check_root(root, self.size())?;
        let mine = if self.rank == root {
            data.clone()
        } else {
            Vec::new()
        };
        let got = self.round(mine, |all| Ok(all[root as usize].clone()))?;
        *data = got;
        Ok(())
    }

    fn gatherv<T: Elem>(&self, root: u32, send: &[T]) -> Result<Option<Buckets<T>>> {
        check_root(root, self.size())?;
        let is_root = self.rank == root;
        self.round(send.to_vec(), |all| {
            Ok(is_root.then(|| Buckets::from_parts(all.iter().map(|v| v.to_vec()).collect())))
        })
    }

    fn alltoallv<T: Elem>(&self, send: &Buckets<T>) -> Result<Buckets<T>> {
        check_buckets(send, self.size())?;
        let me = self.rank as usize;
        self.round(send.clone(), |all| {
            Ok(Buckets::from_parts(
                all.iter().map(|b| b.part(me).to_vec()).collect(),
            ))
        })
    }

    fn transfers(&self) -> u64 {
        self.transfers.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Single;

    #[test]
    fn one_thread_behaves_like_single() {
        let got = Threads::run(1, |t| {
            let mut v = vec![3u32, 4];
            t.broadcast(0, &mut v)?;
            let b = Buckets::from_parts(vec![vec![5u8, 6, 7]]);
            Ok((
                t.allgather(&[1, 2])?,
                v,
                t.gatherv(0, &[9u64])?,
                t.alltoallv(&b)?,
            ))
        });
        let s = Single;
        let b = Buckets::from_parts(vec![vec![5u8, 6, 7]]);
        let want = (
            s.allgather(&[1, 2]).unwrap(),
            vec![3u32, 4],
            s.gatherv(0, &[9u64]).unwrap(),
            s.alltoallv(&b).unwrap(),
        );
        assert_eq!(got.into_iter().next().unwrap().unwrap(), want);
    }

    #[test]
    fn three_ranks_exchange_like_mpi() {
        let out = Threads::run(3, |t| {
            let r = u64::from(t.rank());
            let all = t.allgather(&[r, r * 10])?;
            assert_eq!(all, [0, 0, 1, 10, 2, 20]);
            let mut v = if r == 1 { vec![7u64, 8] } else { vec![] };
            t.broadcast(1, &mut v)?;
            assert_eq!(v, [7, 8]);
            let g = t.gatherv(2, &vec![r as u32; r as usize])?;
            if r == 2 {
                let g = g.unwrap();
                assert_eq!(
                    (g.counts(), g.data()),
                    (&[0u64, 1, 2][..], &[1u32, 2, 2][..])
                );
            } else {
                assert!(g.is_none());
            }
            // Rank i sends j copies of 10 * i + j to rank j.
            let send = Buckets::from_parts((0..3).map(|j| vec![10 * r + j; j as usize]).collect());
            let got = t.alltoallv(&send)?;
            let want: Vec<Vec<u64>> = (0..3).map(|i| vec![10 * i + r; r as usize]).collect();
            assert_eq!(got, Buckets::from_parts(want));
            assert!(t.alltoallv(&Buckets::from_parts(vec![vec![1u64]])).is_err());
            t.all_sum(r + 1)
        });
        for o in out {
            assert_eq!(o.unwrap(), 6);
        }
    }

    #[test]
    fn a_failing_rank_ends_the_others() {
        let out = Threads::run(3, |t| {
            if t.rank() == 1 {
                return Err(exchange_error("rank 1 broke".into()));
            }
            t.barrier()?;
            t.allgather(&[1])?;
            Ok(())
        });
        assert!(out[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("rank 1 broke"));
        for r in [0, 2] {
            let e = out[r].as_ref().unwrap_err().to_string();
            assert!(e.contains("rank 1 failed"), "{e}");
        }
    }
}
