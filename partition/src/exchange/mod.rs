//! The transport of partition mode DistParMETIS: every worker is one rank,
//! and the ranks move data with a few collective operations behind the
//! [`Exchange`] trait.
//!
//! - [`Single`]: a world of one process, so the pipeline runs without MPI;
//! - [`Threads`]: N ranks as threads of one process (tests, measurements);
//! - `MpiExchange` (feature `mpi`): MPI through rsmpi, started by `mpirun`
//!   (on a cluster through `dglrun rsh`, never ssh).
//!
//! MPI counts and displacements are C `int`s, so no single MPI call may
//! carry more than `i32::MAX` elements, nor address a buffer past that. The
//! MPI implementation splits every large operation into rounds that stay
//! below [`plan::Limits`] (the chunking arithmetic lives in [`plan`], pure
//! and tested on its own with tiny limits); callers use 64-bit counts only.

mod edges;
pub mod plan;
pub mod selftest;
mod single;
mod threads;

#[cfg(feature = "mpi")]
mod mpi;

#[cfg(feature = "mpi")]
pub use self::mpi::MpiExchange;
pub use edges::{edges_to_owners, Received};
pub use single::Single;
pub use threads::Threads;

use crate::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for i64 {}
}

/// An element type the exchange moves: bytes (features, serialised
/// records), u32 (partition ids), u64 / i64 (ids, counts).
#[cfg(feature = "mpi")]
pub trait Elem:
    sealed::Sealed + Copy + Default + Send + Sync + 'static + ::mpi::traits::Equivalence
{
}
/// An element type the exchange moves: bytes (features, serialised
/// records), u32 (partition ids), u64 / i64 (ids, counts).
#[cfg(not(feature = "mpi"))]
pub trait Elem: sealed::Sealed + Copy + Default + Send + Sync + 'static {}

impl Elem for u8 {}
impl Elem for u32 {}
impl Elem for u64 {}
impl Elem for i64 {}

/// The collective operations the distributed pipeline needs. Every rank
/// calls the same operations in the same order (as with MPI itself).
pub trait Exchange {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> u32;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// Waits until every rank got here.
    fn barrier(&self) -> Result<()>;
    /// `values` of every rank, rank order; every rank gives the same number.
    fn allgather(&self, values: &[u64]) -> Result<Vec<u64>>;
    /// Replaces `data` on every rank by `root`'s `data`.
    fn broadcast<T: Elem>(&self, root: u32, data: &mut Vec<T>) -> Result<()>;
    /// Every rank's `send`, concatenated in rank order, on `root` (`None`
    /// on the other ranks).
    fn gatherv<T: Elem>(&self, root: u32, send: &[T]) -> Result<Option<Buckets<T>>>;
    /// Sends bucket `j` of `send` to rank `j`; returns what every rank sent
    /// to this one, bucket `i` from rank `i`.
    fn alltoallv<T: Elem>(&self, send: &Buckets<T>) -> Result<Buckets<T>>;
    /// [`Self::alltoallv`] receiving into `buf`'s storage (its contents are
    /// dropped), for rounds that reuse one buffer.
    fn alltoallv_into<T: Elem>(&self, send: &Buckets<T>, buf: Vec<T>) -> Result<Buckets<T>> {
        drop(buf);
        self.alltoallv(send)
    }
    /// Data-moving calls issued so far into the transport (MPI calls; 0 for
    /// [`Single`]), for logs and for tests of the chunking.
    fn transfers(&self) -> u64 {
        0
    }
    /// Bytes this rank has handed to other ranks so far (0 for [`Single`]),
    /// for the benchmark's per-rank figures.
    fn bytes_sent(&self) -> u64 {
        0
    }

    /// The largest `value` over all ranks.
    fn all_max(&self, value: u64) -> Result<u64> {
        Ok(self.allgather(&[value])?.into_iter().max().unwrap_or(value))
    }

    /// The sum of `value` over all ranks.
    fn all_sum(&self, value: u64) -> Result<u64> {
        Ok(self.allgather(&[value])?.into_iter().sum())
    }
}

/// A flat buffer cut into consecutive buckets, one per rank: what
/// [`Exchange::alltoallv`] sends and receives and [`Exchange::gatherv`]
/// returns. The counts always add up to the data's length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buckets<T> {
    data: Vec<T>,
    counts: Vec<u64>,
}

impl<T: Copy> Buckets<T> {
    /// `data` cut into buckets of `counts` elements.
    pub fn new(data: Vec<T>, counts: Vec<u64>) -> Result<Self> {
        let sum: u64 = counts.iter().sum();
        if sum != data.len() as u64 {
            return Err(exchange_error(format!(
                "bucket counts add up to {sum} elements but the buffer holds {}",
                data.len()
            )));
        }
        Ok(Buckets { data, counts })
    }

    /// One bucket per vector, in order.
    pub fn from_parts(parts: Vec<Vec<T>>) -> Self {
        let counts = parts.iter().map(|p| p.len() as u64).collect();
        Buckets {
            data: parts.concat(),
            counts,
        }
    }
}

impl<T: Copy + Default> Buckets<T> {
    /// Groups rows by destination, keeping their order within a bucket (a
    /// stable counting sort): row `r` (`row_len` elements of `rows`) goes to
    /// bucket `dest[r]` of `num_buckets`.
    pub fn by_destination(
        rows: &[T],
        row_len: usize,
        dest: &[u32],
        num_buckets: u32,
    ) -> Result<Self> {
        if row_len == 0 || rows.len() != dest.len() * row_len {
            return Err(exchange_error(format!(
                "{} elements are not {} rows of {row_len}",
                rows.len(),
                dest.len()
            )));
        }
        Self::by_destination_with(row_len, dest, num_buckets, Vec::new(), |r, out| {
            out.copy_from_slice(&rows[r * row_len..(r + 1) * row_len])
        })
    }

    /// As [`Self::by_destination`], row `r` written by `row(r, slot)` straight
    /// into its bucket (no list of rows first), in `buf`'s storage: a
    /// buffer reused round after round costs no fresh pages.
    pub fn by_destination_with(
        row_len: usize,
        dest: &[u32],
        num_buckets: u32,
        mut buf: Vec<T>,
        mut row: impl FnMut(usize, &mut [T]),
    ) -> Result<Self> {
        let mut counts = vec![0u64; num_buckets as usize];
        for (r, &d) in dest.iter().enumerate() {
            let c = counts.get_mut(d as usize).ok_or_else(|| {
                exchange_error(format!(
                    "row {r} is sent to rank {d} but there are {num_buckets} ranks"
                ))
            })?;
            *c += row_len as u64;
        }
        let len = dest.len().checked_mul(row_len).ok_or_else(|| {
            exchange_error(format!(
                "{} rows of {row_len} overflow a buffer",
                dest.len()
            ))
        })?;
        let mut next = plan::offsets(&counts);
        buf.clear();
        buf.resize(len, T::default());
        for (r, &d) in dest.iter().enumerate() {
            let at = next[d as usize] as usize;
            row(r, &mut buf[at..at + row_len]);
            next[d as usize] += row_len as u64;
        }
        Ok(Buckets { data: buf, counts })
    }
}

/// The buffers of a sequence of alltoallv rounds, kept from one round to
/// the next: a fresh buffer costs a page fault per 4 KiB in every round
/// (on the 1× graph, faults were a sixth of rank 0's CPU, mostly these).
#[derive(Debug, Default)]
pub struct RoundBuffers<T> {
    /// This round's rows, filled by the caller (`row_len` elements each).
    pub rows: Vec<T>,
    /// The rank each row goes to.
    pub dest: Vec<u32>,
    send: Vec<T>,
    recv: Vec<T>,
}

impl<T: Elem> RoundBuffers<T> {
    /// Sends the round's rows to their ranks and returns what this rank
    /// received; `rows` and `dest` are emptied for the next round. Give
    /// the result back with [`Self::recycle`].
    pub fn exchange<E: Exchange>(&mut self, ex: &E, row_len: usize) -> Result<Buckets<T>> {
        if row_len == 0 || self.rows.len() != self.dest.len() * row_len {
            return Err(exchange_error(format!(
                "{} elements are not {} rows of {row_len}",
                self.rows.len(),
                self.dest.len()
            )));
        }
        let rows = &self.rows;
        let send = Buckets::by_destination_with(
            row_len,
            &self.dest,
            ex.size(),
            std::mem::take(&mut self.send),
            |r, out| out.copy_from_slice(&rows[r * row_len..(r + 1) * row_len]),
        )?;
        self.rows.clear();
        self.dest.clear();
        let got = ex.alltoallv_into(&send, std::mem::take(&mut self.recv));
        self.send = send.into_data();
        got
    }

    /// A received round's storage, for the next round to receive into.
    pub fn recycle(&mut self, got: Buckets<T>) {
        self.recv = got.into_data();
    }
}

impl<T> Buckets<T> {
    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Elements per bucket.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// All elements, bucket after bucket.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The elements, dropping the cut.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// Bucket `i`.
    pub fn part(&self, i: usize) -> &[T] {
        let start: u64 = self.counts[..i].iter().sum();
        &self.data[start as usize..(start + self.counts[i]) as usize]
    }

    /// Every bucket in order.
    pub fn parts(&self) -> impl Iterator<Item = &[T]> {
        let mut at = 0usize;
        self.counts.iter().map(move |&c| {
            let p = &self.data[at..at + c as usize];
            at += c as usize;
            p
        })
    }
}

pub(crate) fn exchange_error(message: String) -> Error {
    Error::Stage {
        stage: "exchange",
        message,
    }
}

/// Checks that `root` is a rank of a world of `size`.
pub(crate) fn check_root(root: u32, size: u32) -> Result<()> {
    if root < size {
        Ok(())
    } else {
        Err(exchange_error(format!(
            "root rank {root} is not in a world of {size} rank(s)"
        )))
    }
}

/// Checks that a send has one bucket per rank.
pub(crate) fn check_buckets<T>(send: &Buckets<T>, size: u32) -> Result<()> {
    if send.len() == size as usize {
        Ok(())
    } else {
        Err(exchange_error(format!(
            "alltoallv needs one bucket per rank: {} bucket(s) for {size} rank(s)",
            send.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_check_their_counts_and_cut_the_buffer() {
        assert!(Buckets::new(vec![1u64, 2, 3], vec![1, 1]).is_err());
        let b = Buckets::new(vec![1u64, 2, 3], vec![2, 0, 1]).unwrap();
        assert_eq!(b.part(0), &[1, 2]);
        assert_eq!(b.part(1), &[] as &[u64]);
        assert_eq!(b.part(2), &[3]);
        let parts: Vec<&[u64]> = b.parts().collect();
        assert_eq!(parts, [&[1u64, 2][..], &[], &[3]]);
        assert_eq!(Buckets::from_parts(vec![vec![1u64, 2], vec![], vec![3]]), b);
    }

    #[test]
    fn by_destination_is_a_stable_sort_of_rows() {
        // Rows of two elements, sent to ranks 1, 0, 1, 2.
        let rows = [10u32, 11, 20, 21, 30, 31, 40, 41];
        let b = Buckets::by_destination(&rows, 2, &[1, 0, 1, 2], 3).unwrap();
        assert_eq!(b.counts(), &[2, 4, 2]);
        assert_eq!(b.data(), &[20, 21, 10, 11, 30, 31, 40, 41]);
        let e = Buckets::by_destination(&rows, 2, &[1, 0, 1, 3], 3).unwrap_err();
        assert!(e.to_string().contains("row 3 is sent to rank 3"), "{e}");
        assert!(Buckets::by_destination(&rows, 3, &[0, 0], 1).is_err());
        let empty = Buckets::<u8>::by_destination(&[], 4, &[], 2).unwrap();
        assert_eq!(empty.counts(), &[0, 0]);
    }

    /// Rounds of different sizes through one set of buffers deliver what
    /// a fresh alltoallv of each round would, and leave the rows empty.
    #[test]
    fn round_buffers_deliver_each_round_as_a_fresh_exchange() {
        let out = Threads::run(3, |t| {
            let r = u64::from(t.rank());
            let mut bufs = RoundBuffers::default();
            for round in [5u64, 1, 0, 9] {
                // Row [r, i] goes to rank (r + i) % 3.
                for i in 0..round {
                    bufs.rows.extend([r, i]);
                    bufs.dest.push(((r + i) % 3) as u32);
                }
                let want = Buckets::by_destination(&bufs.rows, 2, &bufs.dest, 3)?;
                let want = t.alltoallv(&want)?;
                let got = bufs.exchange(t, 2)?;
                assert_eq!(got, want, "round of {round}");
                assert!(bufs.rows.is_empty() && bufs.dest.is_empty());
                bufs.recycle(got);
            }
            bufs.rows.push(1);
            assert!(bufs.exchange(t, 2).is_err());
            Ok(())
        });
        for o in out {
            o.unwrap();
        }
    }
}
