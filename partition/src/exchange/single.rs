//! A world of one rank: every collective is a copy. Lets the distributed
//! pipeline run in one process without MPI.

use super::{check_buckets, check_root, Buckets, Elem, Exchange};
use crate::Result;

/// The exchange of a single process (rank 0 of 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct Single;

impl Exchange for Single {
    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        1
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn allgather(&self, values: &[u64]) -> Result<Vec<u64>> {
        Ok(values.to_vec())
    }

    fn broadcast<T: Elem>(&self, root: u32, _data: &mut Vec<T>) -> Result<()> {
        check_root(root, 1)
    }

    fn gatherv<T: Elem>(&self, root: u32, send: &[T]) -> Result<Option<Buckets<T>>> {
        check_root(root, 1)?;
        Ok(Some(Buckets::from_parts(vec![send.to_vec()])))
    }

    fn alltoallv<T: Elem>(&self, send: &Buckets<T>) -> Result<Buckets<T>> {
        check_buckets(send, 1)?;
        Ok(send.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_of_one_copies_and_checks_ranks() {
        let s = Single;
        assert_eq!((s.rank(), s.size()), (0, 1));
        let mut v = vec![1u64, 2];
        s.broadcast(0, &mut v).unwrap();
        assert_eq!(v, [1, 2]);
        assert!(s.broadcast(1, &mut v).is_err());
        let g = s.gatherv(0, &[7u32, 8]).unwrap().unwrap();
        assert_eq!((g.counts(), g.data()), (&[2u64][..], &[7u32, 8][..]));
        let b = Buckets::from_parts(vec![vec![5u8, 6, 7]]);
        assert_eq!(s.alltoallv(&b).unwrap(), b);
        let two = Buckets::from_parts(vec![vec![5u8], vec![6]]);
        assert!(s.alltoallv(&two).is_err());
        assert_eq!(s.all_max(4).unwrap(), 4);
        assert_eq!(s.all_sum(4).unwrap(), 4);
    }
}
