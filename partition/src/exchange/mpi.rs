//! The exchange over MPI (rsmpi), for ranks started by `mpirun`.
//!
//! Every operation first agrees on sizes with small fixed-size collectives,
//! then moves the payload in one call when every count and displacement
//! fits the limits, else in staged rounds (see [`super::plan`]). Only the
//! thread that called [`MpiExchange::init`] may use it (MPI's `FUNNELED`
//! level: rayon's threads compute, this one talks).

use std::cell::Cell;

use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::{Process, SimpleCommunicator};
use mpi::traits::*;
use mpi::Threading;

use super::plan::{self, Layout, Limits, MPI_MAX_COUNT};
use super::{check_buckets, check_root, exchange_error, Buckets, Elem, Exchange};
use crate::Result;

/// An empty slice's pointer is dangling (`1` for bytes), and OpenMPI reads
/// `(void *) 1` as `MPI_IN_PLACE`: MPI only ever gets real addresses, an
/// empty slice of `spare` when there is nothing to move.
fn real<'a, T>(s: &'a [T], spare: &'a [T; 1]) -> &'a [T] {
    if s.is_empty() {
        &spare[..0]
    } else {
        s
    }
}

/// [`real`] for a receive buffer.
fn real_mut<'a, T>(s: &'a mut [T], spare: &'a mut [T; 1]) -> &'a mut [T] {
    if s.is_empty() {
        &mut spare[..0]
    } else {
        s
    }
}

/// MPI's world communicator as an [`Exchange`].
pub struct MpiExchange {
    world: SimpleCommunicator,
    rank: u32,
    size: u32,
    limits: Limits,
    transfers: Cell<u64>,
    /// Bytes this rank handed to other ranks (for the benchmark's figures).
    sent: Cell<u64>,
    /// Finalises MPI when dropped, after `world` (fields drop in order).
    _universe: Universe,
}

impl MpiExchange {
    /// Initialises MPI (once per process).
    pub fn init() -> Result<Self> {
        let (universe, level) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| exchange_error("MPI is already initialised in this process".into()))?;
        if level == Threading::Single {
            tracing::warn!(
                "the MPI library offers no thread support; rayon's threads must never call MPI"
            );
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as u32, world.size() as u32);
        Ok(MpiExchange {
            world,
            rank,
            size,
            limits: Limits::default(),
            transfers: Cell::new(0),
            sent: Cell::new(0),
            _universe: universe,
        })
    }

    /// Smaller limits than MPI's (tests force chunking with them).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Ends every rank of the job: after an error on one rank the others
    /// would wait forever in their next collective.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    fn root(&self, root: u32) -> Result<Process<'_>> {
        check_root(root, self.size)?;
        Ok(self.world.process_at_rank(root as i32))
    }

    fn max_count(&self) -> u64 {
        self.limits.max_count.clamp(1, MPI_MAX_COUNT)
    }

    fn moved(&self) {
        self.transfers.set(self.transfers.get() + 1);
    }

    /// Counts `elems` elements of `T` sent to each of `peers` other ranks.
    fn sent<T>(&self, elems: u64, peers: u64) {
        let bytes = elems
            .saturating_mul(std::mem::size_of::<T>() as u64)
            .saturating_mul(peers);
        self.sent.set(self.sent.get().saturating_add(bytes));
    }

    /// Gathers in rounds of at most `quota` elements per rank, staged on
    /// the root.
    fn gatherv_rounds<T: Elem>(
        &self,
        root: Process<'_>,
        send: &[T],
        totals: &[u64],
        out: Option<&mut Vec<T>>,
    ) -> Result<()> {
        let quota = self.limits.pair_quota(self.size, std::mem::size_of::<T>());
        let largest = totals.iter().copied().max().unwrap_or(0);
        let mut stage = Vec::new();
        let mut out = out;
        let (spare, mut rspare) = ([T::default()], [T::default()]);
        for r in 0..plan::rounds(largest, quota) {
            let mine = plan::round_range(send.len() as u64, quota, r);
            let slice = real(&send[mine.start as usize..mine.end as usize], &spare);
            match out.as_deref_mut() {
                Some(out) => {
                    let l = Layout::round(totals, quota, r, self.max_count())?;
                    stage.resize(l.total, T::default());
                    let buf = real_mut(&mut stage[..], &mut rspare);
                    let mut p = PartitionMut::new(buf, &l.counts[..], &l.displs[..]);
                    root.gather_varcount_into_root(slice, &mut p);
                    plan::unpack(&stage, totals, quota, r, out);
                }
                None => root.gather_varcount_into(slice),
            }
            self.moved();
        }
        Ok(())
    }

    /// Exchanges in rounds of at most `quota` elements per pair, staged on
    /// both sides.
    fn alltoallv_rounds<T: Elem>(
        &self,
        send: &Buckets<T>,
        recv_totals: &[u64],
        largest: u64,
        out: &mut [T],
    ) -> Result<()> {
        let quota = self.limits.pair_quota(self.size, std::mem::size_of::<T>());
        let (mut sstage, mut rstage) = (Vec::new(), Vec::new());
        let (spare, mut rspare) = ([T::default()], [T::default()]);
        for r in 0..plan::rounds(largest, quota) {
            let sl = Layout::round(send.counts(), quota, r, self.max_count())?;
            let rl = Layout::round(recv_totals, quota, r, self.max_count())?;
            plan::pack(send.data(), send.counts(), quota, r, &mut sstage);
            rstage.resize(rl.total, T::default());
            let rbuf = real_mut(&mut rstage[..], &mut rspare);
            self.world.all_to_all_varcount_into(
                &Partition::new(real(&sstage, &spare), &sl.counts[..], &sl.displs[..]),
                &mut PartitionMut::new(rbuf, &rl.counts[..], &rl.displs[..]),
            );
            plan::unpack(&rstage, recv_totals, quota, r, out);
            self.moved();
        }
        Ok(())
    }
}

impl Exchange for MpiExchange {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn barrier(&self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }

    fn allgather(&self, values: &[u64]) -> Result<Vec<u64>> {
        let n = values.len() as u64 * u64::from(self.size);
        if n > MPI_MAX_COUNT {
            return Err(exchange_error(format!(
                "allgather of {} values per rank is too large; use gatherv",
                values.len()
            )));
        }
        let mut out = vec![0u64; n as usize];
        self.sent::<u64>(values.len() as u64, u64::from(self.size) - 1);
        let (spare, mut rspare) = ([0u64], [0u64]);
        self.world
            .all_gather_into(real(values, &spare), real_mut(&mut out[..], &mut rspare));
        Ok(out)
    }

    fn broadcast<T: Elem>(&self, root: u32, data: &mut Vec<T>) -> Result<()> {
        let p = self.root(root)?;
        let mut len = [data.len() as u64];
        p.broadcast_into(&mut len[..]);
        if self.rank != root {
            data.clear();
            data.resize(len[0] as usize, T::default());
        } else {
            self.sent::<T>(len[0], u64::from(self.size) - 1);
        }
        // Contiguous pieces: no staging needed, only the count limit.
        for chunk in data.chunks_mut(self.max_count() as usize) {
            p.broadcast_into(chunk);
            self.moved();
        }
        Ok(())
    }

    fn gatherv<T: Elem>(&self, root: u32, send: &[T]) -> Result<Option<Buckets<T>>> {
        let p = self.root(root)?;
        let totals = self.allgather(&[send.len() as u64])?;
        let sum: u64 = totals.iter().sum();
        let mut out = (self.rank == root).then(|| vec![T::default(); sum as usize]);
        if self.rank != root {
            self.sent::<T>(send.len() as u64, 1);
        }
        if sum <= self.max_count() {
            let (spare, mut rspare) = ([T::default()], [T::default()]);
            let send = real(send, &spare);
            match out.as_mut() {
                Some(buf) => {
                    let l = Layout::of(&totals, self.max_count())?;
                    let buf = real_mut(&mut buf[..], &mut rspare);
                    let mut part = PartitionMut::new(buf, &l.counts[..], &l.displs[..]);
                    p.gather_varcount_into_root(send, &mut part);
                }
                None => p.gather_varcount_into(send),
            }
            self.moved();
        } else {
            self.gatherv_rounds(p, send, &totals, out.as_mut())?;
        }
        out.map(|d| Buckets::new(d, totals)).transpose()
    }

    fn alltoallv<T: Elem>(&self, send: &Buckets<T>) -> Result<Buckets<T>> {
        self.alltoallv_into(send, Vec::new())
    }

    fn alltoallv_into<T: Elem>(&self, send: &Buckets<T>, mut out: Vec<T>) -> Result<Buckets<T>> {
        check_buckets(send, self.size)?;
        let to_others: u64 = send.counts().iter().sum::<u64>() - send.counts()[self.rank as usize];
        self.sent::<T>(to_others, 1);
        let mut recv_totals = vec![0u64; self.size as usize];
        self.world
            .all_to_all_into(send.counts(), &mut recv_totals[..]);
        let recv_sum: u64 = recv_totals.iter().sum();
        let fits = send.data().len() as u64 <= self.max_count() && recv_sum <= self.max_count();
        let largest = send.counts().iter().copied().max().unwrap_or(0);
        // Every rank must take the same path: agree on it.
        let agreed = self.allgather(&[u64::from(fits), largest])?;
        if out.capacity() < recv_sum as usize {
            // Zeroed fresh (calloc: pages are mapped as they are written).
            out = vec![T::default(); recv_sum as usize];
        } else {
            out.clear();
            out.resize(recv_sum as usize, T::default());
        }
        if agreed.chunks(2).all(|c| c[0] == 1) {
            let sl = Layout::of(send.counts(), self.max_count())?;
            let rl = Layout::of(&recv_totals, self.max_count())?;
            let (spare, mut rspare) = ([T::default()], [T::default()]);
            self.world.all_to_all_varcount_into(
                &Partition::new(real(send.data(), &spare), &sl.counts[..], &sl.displs[..]),
                &mut PartitionMut::new(
                    real_mut(&mut out[..], &mut rspare),
                    &rl.counts[..],
                    &rl.displs[..],
                ),
            );
            self.moved();
        } else {
            let largest = agreed.chunks(2).map(|c| c[1]).max().unwrap_or(0);
            self.alltoallv_rounds(send, &recv_totals, largest, &mut out)?;
        }
        Buckets::new(out, recv_totals)
    }

    fn transfers(&self) -> u64 {
        self.transfers.get()
    }

    fn bytes_sent(&self) -> u64 {
        self.sent.get()
    }
}
