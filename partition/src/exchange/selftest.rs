//! A check of a transport with known data: every collective of
//! [`Exchange`] in u64, u32 and bytes, with uneven and empty buckets, each
//! rank checking every element it receives. `dgl-partition selftest` runs it
//! on the ranks `mpirun` starts (the tests of `dglrun rsh` do, across network
//! namespaces).

use std::fmt;

use super::{Buckets, Elem, Exchange};
use crate::{Error, Result};

/// What a rank checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub rank: u32,
    pub size: u32,
    /// Elements received and checked.
    pub checked: u64,
    /// Data-moving transport calls (more than one per operation when the
    /// limits forced rounds).
    pub transfers: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} of {}: {} elements checked in {} transfers",
            self.rank, self.size, self.checked, self.transfers
        )
    }
}

/// The value rank `from` sends rank `to` at position `k` (any element type
/// takes its low bits).
fn value(from: u32, to: u32, k: u64) -> u64 {
    (u64::from(from) * 1_000_003 + u64::from(to) * 10_007 + k).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 8
}

/// Elements rank `from` sends rank `to`: uneven, some zero.
fn count(from: u32, to: u32, scale: u64) -> u64 {
    u64::from((from * 7 + to * 3) % 5) * scale + u64::from((from + to) % 3)
}

fn fill<T: Elem>(from: u32, to: u32, n: u64, conv: fn(u64) -> T) -> Vec<T> {
    (0..n).map(|k| conv(value(from, to, k))).collect()
}

fn check<T: Elem + PartialEq + fmt::Debug>(
    what: &str,
    me: u32,
    from: u32,
    got: &[T],
    want_len: u64,
    conv: fn(u64) -> T,
) -> Result<u64> {
    let fail = |message: String| Error::Stage {
        stage: "selftest",
        message: format!("rank {me}, {what} from rank {from}: {message}"),
    };
    if got.len() as u64 != want_len {
        return Err(fail(format!(
            "expected {want_len} elements, got {}",
            got.len()
        )));
    }
    for (k, g) in got.iter().enumerate() {
        let want = conv(value(from, me, k as u64));
        if *g != want {
            return Err(fail(format!("element {k} is {g:?}, expected {want:?}")));
        }
    }
    Ok(want_len)
}

/// Runs the check; `scale` sets the data size (elements per pair grow
/// linearly with it).
pub fn run<E: Exchange>(ex: &E, scale: u64) -> Result<Report> {
    let (me, size) = (ex.rank(), ex.size());
    let mut checked = 0;
    ex.barrier()?;

    let all = ex.allgather(&[u64::from(me), u64::from(me) * 10])?;
    let want: Vec<u64> = (0..u64::from(size)).flat_map(|r| [r, r * 10]).collect();
    if all != want {
        return Err(Error::Stage {
            stage: "selftest",
            message: format!("rank {me}: allgather gave {all:?}, expected {want:?}"),
        });
    }
    let sum = ex.all_sum(u64::from(me) + 1)?;
    if sum != u64::from(size) * u64::from(size + 1) / 2 {
        return Err(Error::Stage {
            stage: "selftest",
            message: format!("rank {me}: all_sum gave {sum}"),
        });
    }

    // Broadcast from the last rank (not 0, to catch a root mix-up).
    let root = size - 1;
    let n = 3 * scale + 1;
    let mut data = if me == root {
        fill(root, root, n, |v| v)
    } else {
        vec![1, 2, 3]
    };
    ex.broadcast(root, &mut data)?;
    checked += check("broadcast", root, root, &data, n, |v| v)?;

    // Gather u32 to rank 0.
    let mine = fill(me, 0, count(me, 0, scale) + 1, |v| v as u32);
    if let Some(g) = ex.gatherv(0, &mine)? {
        for (from, part) in g.parts().enumerate() {
            let n = count(from as u32, 0, scale) + 1;
            checked += check("gatherv", 0, from as u32, part, n, |v| v as u32)?;
        }
    }

    // Bytes, where even ranks send nothing at all: an empty buffer's
    // pointer must never reach MPI (for bytes it reads as MPI_IN_PLACE).
    let n = if me % 2 == 0 {
        0
    } else {
        count(me, 0, scale) + 1
    };
    if let Some(g) = ex.gatherv(0, &fill(me, 0, n, |v| v as u8))? {
        for (from, part) in g.parts().enumerate() {
            let n = if from % 2 == 0 {
                0
            } else {
                count(from as u32, 0, scale) + 1
            };
            checked += check("gatherv", 0, from as u32, part, n, |v| v as u8)?;
        }
    }

    checked += all_to_all(ex, scale, count, |v| v)?;
    checked += all_to_all(ex, scale * 3, count, |v| v as u8)?;
    checked += all_to_all(ex, scale, sparse_count, |v| v as u8)?;
    ex.barrier()?;
    Ok(Report {
        rank: me,
        size,
        checked,
        transfers: ex.transfers(),
    })
}

/// [`count`], except that rank 0 sends nothing and rank 1 receives nothing
/// (with two ranks, one rank's buffers are both empty).
fn sparse_count(from: u32, to: u32, scale: u64) -> u64 {
    if from == 0 || to == 1 {
        0
    } else {
        count(from, to, scale) + 1
    }
}

fn all_to_all<E: Exchange, T: Elem + PartialEq + fmt::Debug>(
    ex: &E,
    scale: u64,
    count: fn(u32, u32, u64) -> u64,
    conv: fn(u64) -> T,
) -> Result<u64> {
    let (me, size) = (ex.rank(), ex.size());
    let parts = (0..size)
        .map(|to| fill(me, to, count(me, to, scale), conv))
        .collect();
    let got = ex.alltoallv(&Buckets::from_parts(parts))?;
    let mut checked = 0;
    for (from, part) in got.parts().enumerate() {
        let n = count(from as u32, me, scale);
        checked += check("alltoallv", me, from as u32, part, n, conv)?;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Single;

    #[test]
    fn the_selftest_passes_on_a_world_of_one() {
        let r = run(&Single, 10).unwrap();
        assert_eq!((r.rank, r.size, r.transfers), (0, 1, 0));
        // broadcast 31 + gatherv 1 + empty gatherv + alltoallv u64 + bytes
        // (count(0, 0) = 0) + sparse (rank 0 sends nothing).
        assert_eq!(r.checked, 31 + 1 + count(0, 0, 10) + count(0, 0, 30));
    }

    #[test]
    fn a_wrong_element_is_named() {
        let mut got = fill(1, 0, 5, |v| v);
        got[3] ^= 1;
        let e = check("alltoallv", 0, 1, &got, 5, |v| v).unwrap_err();
        assert!(
            e.to_string()
                .contains("rank 0, alltoallv from rank 1: element 3"),
            "{e}"
        );
        let e = check("alltoallv", 0, 1, &got, 6, |v| v).unwrap_err();
        assert!(e.to_string().contains("expected 6 elements"), "{e}");
    }
}
