//! A rank's edges sent to their owners in bounded rounds, its own lists
//! shrinking as they go, so that it holds about one copy of its edges (sent
//! or received) at any time instead of the lists, the rows, the send buffer
//! and the received rows at once.

use super::{exchange_error, Buckets, Exchange};
use crate::Result;

/// Edges received from every rank: ids, sources and destinations, in the
/// order one alltoallv would give (by sending rank, then in its order).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Received {
    pub eids: Vec<u64>,
    pub src: Vec<u64>,
    pub dst: Vec<u64>,
}

/// Sends edge `i` of this rank's lists (id `first + i`, ends `src[i]` and
/// `dst[i]`) to rank `dest[i]`, at most `round` edges per round, from the
/// end of the lists backwards; `src` and `dst` are cut and released after
/// each round. Every rank must call it (it is a sequence of collectives).
pub fn edges_to_owners<E: Exchange>(
    ex: &E,
    first: u64,
    mut src: Vec<u64>,
    mut dst: Vec<u64>,
    dest: &[u32],
    round: usize,
) -> Result<Received> {
    let world = ex.size() as usize;
    if src.len() != dst.len() || src.len() != dest.len() {
        return Err(exchange_error(format!(
            "{} sources, {} destinations and {} owners: one each per edge",
            src.len(),
            dst.len(),
            dest.len()
        )));
    }
    let (start, mut end) = receive_slots(ex, dest, world)?;
    let total = end.last().copied().unwrap_or(0) as usize;
    let mut out = Received {
        eids: vec![0; total],
        src: vec![0; total],
        dst: vec![0; total],
    };
    let round = round.max(1);
    let chunks = src.len().div_ceil(round);
    let rounds = ex.all_max(chunks as u64)?;
    // What was received is kept for the next round to receive into (fresh
    // pages cost a fault each); the send buffer is not, so that it is gone
    // while the rows are placed into `out`, whose pages fill only then.
    let mut recv_buf = Vec::new();
    for i in 0..rounds as usize {
        // Backwards: chunk `chunks - 1` first, so the lists only shrink.
        let lo = chunks.checked_sub(i + 1).map_or(src.len(), |c| c * round);
        let send = Buckets::by_destination_with(
            3,
            &dest[lo..src.len()],
            ex.size(),
            Vec::new(),
            |k, row| {
                let j = lo + k;
                row.copy_from_slice(&[first + j as u64, src[j], dst[j]]);
            },
        )?;
        let got = ex.alltoallv_into(&send, recv_buf)?;
        drop(send);
        for (r, piece) in got.parts().enumerate() {
            place(&mut out, piece, r, start[r], &mut end[r])?;
        }
        recv_buf = got.into_data();
        for list in [&mut src, &mut dst] {
            list.truncate(lo);
            list.shrink_to_fit();
        }
    }
    if let Some(r) = (0..world).find(|&r| end[r] != start[r]) {
        return Err(exchange_error(format!(
            "rank {r} announced {} more edges than it sent",
            end[r] - start[r]
        )));
    }
    Ok(out)
}

/// Where each sender's edges go in what this rank receives: the first slot
/// and one past the last (the counts are exchanged first).
fn receive_slots<E: Exchange>(ex: &E, dest: &[u32], world: usize) -> Result<(Vec<u64>, Vec<u64>)> {
    let mut counts = vec![0u64; world];
    for (i, &d) in dest.iter().enumerate() {
        *counts.get_mut(d as usize).ok_or_else(|| {
            exchange_error(format!(
                "edge {i} is sent to rank {d} but there are {world} ranks"
            ))
        })? += 1;
    }
    let all = ex.allgather(&counts)?;
    let me = ex.rank() as usize;
    let (mut start, mut end) = (Vec::with_capacity(world), Vec::with_capacity(world));
    let mut at = 0u64;
    for r in 0..world {
        start.push(at);
        at = at
            .checked_add(all[r * world + me])
            .ok_or_else(|| exchange_error("received edge count overflows".into()))?;
        end.push(at);
    }
    Ok((start, end))
}

/// Puts one round's rows from rank `r` just before `end` (its rounds come
/// last chunk first).
fn place(out: &mut Received, piece: &[u64], r: usize, start: u64, end: &mut u64) -> Result<()> {
    let k = (piece.len() / 3) as u64;
    if k > *end - start {
        return Err(exchange_error(format!(
            "rank {r} sent more edges than it announced"
        )));
    }
    *end -= k;
    let at = *end as usize;
    for (i, row) in piece.chunks_exact(3).enumerate() {
        out.eids[at + i] = row[0];
        out.src[at + i] = row[1];
        out.dst[at + i] = row[2];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Threads;

    /// Rank r has 5 + r edges with ids 100 r.. and ends (r, j); edge j goes
    /// to rank (j + r) % n. Whatever the round, a rank receives what one
    /// alltoallv gives: by sender, then in the sender's order.
    #[test]
    fn rounds_give_one_alltoallv_order() {
        for (n, round) in [(1u32, 1usize), (3, 1), (3, 2), (3, 100), (4, 3)] {
            let got = Threads::run(n, |ex| {
                let r = ex.rank() as u64;
                let m = 5 + r as usize;
                let src: Vec<u64> = (0..m as u64).map(|_| r).collect();
                let dst: Vec<u64> = (0..m as u64).collect();
                let dest: Vec<u32> = (0..m)
                    .map(|j| ((j as u64 + r) % u64::from(n)) as u32)
                    .collect();
                edges_to_owners(ex, 100 * r, src, dst, &dest, round)
            });
            for (me, res) in got.into_iter().enumerate() {
                let res = res.unwrap();
                let mut want = Received::default();
                for r in 0..u64::from(n) {
                    for j in 0..5 + r {
                        if (j + r) % u64::from(n) == me as u64 {
                            want.eids.push(100 * r + j);
                            want.src.push(r);
                            want.dst.push(j);
                        }
                    }
                }
                assert_eq!(res, want, "{n} ranks, rounds of {round}, rank {me}");
            }
        }
    }

    #[test]
    fn mismatched_lists_and_owners_are_errors() {
        let e = edges_to_owners(&crate::exchange::Single, 0, vec![1, 2], vec![3], &[0, 0], 4)
            .unwrap_err();
        assert!(e.to_string().contains("2 sources, 1 destinations"), "{e}");
        let e =
            edges_to_owners(&crate::exchange::Single, 0, vec![1], vec![3], &[2], 4).unwrap_err();
        assert!(e.to_string().contains("edge 0 is sent to rank 2"), "{e}");
    }
}
