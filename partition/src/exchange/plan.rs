//! The chunking arithmetic of the exchange, apart from any transport so
//! that it can be tested with tiny limits.
//!
//! A bucketed operation (alltoallv, gatherv) that does not fit one call runs
//! in rounds. In each round every pair of ranks moves at most `quota`
//! elements of its stream (the next slice of what one rank sends the other),
//! where `quota = round_elems / size`: so one rank never sends, receives or
//! addresses more than `round_elems` elements in a round, which is below
//! both `i32::MAX` and the round's memory budget. Every rank derives the
//! same number of rounds from the largest pair stream. The slices of a round
//! are packed into (and unpacked from) a staging buffer, because their
//! places in the whole buffers may lie beyond what an `int` displacement
//! reaches.

use std::ops::Range;

use super::exchange_error;
use crate::Result;

/// The largest count or displacement of one MPI call (a C `int`).
pub const MPI_MAX_COUNT: u64 = i32::MAX as u64;
/// Default memory budget of one staged round, per direction and rank.
pub const DEFAULT_ROUND_BYTES: u64 = 256 << 20;

/// How much one call, and one staged round, may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest element count or displacement of one call (at most
    /// [`MPI_MAX_COUNT`]).
    pub max_count: u64,
    /// Bytes one staged round may hold per direction.
    pub round_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_count: MPI_MAX_COUNT,
            round_bytes: DEFAULT_ROUND_BYTES,
        }
    }
}

impl Limits {
    /// Elements one rank moves per direction in one staged round.
    pub fn round_elems(&self, elem_bytes: usize) -> u64 {
        let by_memory = self.round_bytes / elem_bytes.max(1) as u64;
        self.max_count.min(MPI_MAX_COUNT).min(by_memory).max(1)
    }

    /// Elements one pair of ranks moves in one staged round (at least 1).
    pub fn pair_quota(&self, size: u32, elem_bytes: usize) -> u64 {
        (self.round_elems(elem_bytes) / u64::from(size.max(1))).max(1)
    }
}

/// Where each bucket starts: the exclusive prefix sums of `counts`.
pub fn offsets(counts: &[u64]) -> Vec<u64> {
    let mut at = 0u64;
    counts
        .iter()
        .map(|&c| {
            let o = at;
            at += c;
            o
        })
        .collect()
}

/// Rounds needed to move a stream of `largest` elements, `quota` per round.
pub fn rounds(largest: u64, quota: u64) -> u64 {
    largest.div_ceil(quota.max(1))
}

/// The slice of a stream of `total` elements moved in round `round`.
pub fn round_range(total: u64, quota: u64, round: u64) -> Range<u64> {
    let start = round.saturating_mul(quota).min(total);
    start..start.saturating_add(quota).min(total)
}

/// Counts and displacements of one call, as MPI takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub counts: Vec<i32>,
    pub displs: Vec<i32>,
    /// Elements in all buckets.
    pub total: usize,
}

impl Layout {
    /// A layout of `counts`, checked to stay within `max_count`.
    pub fn of(counts: &[u64], max_count: u64) -> Result<Layout> {
        let max_count = max_count.min(MPI_MAX_COUNT);
        let total: u64 = counts.iter().sum();
        if total > max_count {
            return Err(exchange_error(format!(
                "one call would carry {total} elements, more than the limit of {max_count}"
            )));
        }
        // Every count and displacement is at most `total`, so they fit.
        let as_int = |v: u64| v as i32;
        Ok(Layout {
            counts: counts.iter().map(|&c| as_int(c)).collect(),
            displs: offsets(counts).into_iter().map(as_int).collect(),
            total: total as usize,
        })
    }

    /// The layout of round `round` over buckets of `totals` elements.
    pub fn round(totals: &[u64], quota: u64, round: u64, max_count: u64) -> Result<Layout> {
        let counts: Vec<u64> = totals
            .iter()
            .map(|&t| {
                let r = round_range(t, quota, round);
                r.end - r.start
            })
            .collect();
        Layout::of(&counts, max_count)
    }
}

/// Copies round `round`'s slice of every bucket of `data` (buckets of
/// `totals` elements, back to back) into `out`, bucket after bucket.
pub fn pack<T: Copy>(data: &[T], totals: &[u64], quota: u64, round: u64, out: &mut Vec<T>) {
    out.clear();
    for (&t, o) in totals.iter().zip(offsets(totals)) {
        let r = round_range(t, quota, round);
        out.extend_from_slice(&data[(o + r.start) as usize..(o + r.end) as usize]);
    }
}

/// The inverse of [`pack`]: puts round `round`'s slices from `staged` into
/// their places in `dest` (buckets of `totals` elements, back to back).
pub fn unpack<T: Copy>(staged: &[T], totals: &[u64], quota: u64, round: u64, dest: &mut [T]) {
    let mut at = 0usize;
    for (&t, o) in totals.iter().zip(offsets(totals)) {
        let r = round_range(t, quota, round);
        let n = (r.end - r.start) as usize;
        dest[(o + r.start) as usize..(o + r.start) as usize + n]
            .copy_from_slice(&staged[at..at + n]);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_bound_a_round_by_count_and_memory() {
        let l = Limits {
            max_count: 100,
            round_bytes: 1 << 30,
        };
        assert_eq!(l.round_elems(8), 100);
        assert_eq!(l.pair_quota(3, 8), 33);
        let l = Limits {
            max_count: MPI_MAX_COUNT,
            round_bytes: 64,
        };
        assert_eq!(l.round_elems(8), 8);
        assert_eq!(l.pair_quota(16, 8), 1, "never zero");
        // The default stays below i32::MAX even for bytes.
        assert!(Limits::default().round_elems(1) <= MPI_MAX_COUNT);
        let huge = Limits {
            max_count: u64::MAX,
            round_bytes: u64::MAX,
        };
        assert_eq!(huge.round_elems(1), MPI_MAX_COUNT);
    }

    #[test]
    fn rounds_and_ranges_cover_a_stream_exactly() {
        assert_eq!(rounds(0, 5), 0);
        assert_eq!(rounds(10, 5), 2);
        assert_eq!(rounds(11, 5), 3);
        let covered: Vec<Range<u64>> = (0..3).map(|r| round_range(11, 5, r)).collect();
        assert_eq!(covered, [0..5, 5..10, 10..11]);
        assert_eq!(round_range(11, 5, 7), 11..11);
        assert_eq!(round_range(u64::MAX, u64::MAX, 2), u64::MAX..u64::MAX);
    }

    #[test]
    fn a_layout_never_exceeds_the_limit() {
        let l = Layout::of(&[3, 0, 4], 7).unwrap();
        assert_eq!(
            (l.counts, l.displs, l.total),
            (vec![3, 0, 4], vec![0, 3, 3], 7)
        );
        let e = Layout::of(&[3, 0, 5], 7).unwrap_err();
        assert!(e.to_string().contains("8 elements"), "{e}");
        // Counts of 64-bit size are refused, never truncated.
        assert!(Layout::of(&[1 << 31], u64::MAX).is_err());
        assert!(Layout::of(&[(1 << 31) - 1], u64::MAX).is_ok());
    }

    /// Simulates a chunked alltoallv among `p` ranks with `quota`, through
    /// pack / transfer / unpack, and compares with the direct exchange.
    fn simulate(counts: &[Vec<u64>], quota: u64, max_count: u64) {
        let p = counts.len();
        // Rank i sends to j the values (i, j, k) for k in 0..counts[i][j].
        let send: Vec<Vec<(usize, usize, u64)>> = (0..p)
            .map(|i| {
                (0..p)
                    .flat_map(|j| (0..counts[i][j]).map(move |k| (i, j, k)))
                    .collect()
            })
            .collect();
        let recv_totals: Vec<Vec<u64>> = (0..p)
            .map(|j| (0..p).map(|i| counts[i][j]).collect())
            .collect();
        let mut recv: Vec<Vec<(usize, usize, u64)>> = recv_totals
            .iter()
            .map(|t| vec![(0, 0, 0); t.iter().sum::<u64>() as usize])
            .collect();
        let largest = counts.iter().flatten().copied().max().unwrap_or(0);
        for r in 0..rounds(largest, quota) {
            let mut staged = vec![Vec::new(); p];
            let mut layouts = Vec::new();
            for i in 0..p {
                pack(&send[i], &counts[i], quota, r, &mut staged[i]);
                layouts.push(Layout::round(&counts[i], quota, r, max_count).unwrap());
            }
            for j in 0..p {
                let rl = Layout::round(&recv_totals[j], quota, r, max_count).unwrap();
                let mut stage = Vec::new();
                for i in 0..p {
                    let (c, d) = (layouts[i].counts[j], layouts[i].displs[j]);
                    assert_eq!(c, rl.counts[i], "sender and receiver agree");
                    stage.extend_from_slice(&staged[i][d as usize..(d + c) as usize]);
                }
                assert_eq!(stage.len(), rl.total);
                unpack(&stage, &recv_totals[j], quota, r, &mut recv[j]);
            }
        }
        for (j, got) in recv.iter().enumerate() {
            let want: Vec<_> = (0..p)
                .flat_map(|i| (0..counts[i][j]).map(move |k| (i, j, k)))
                .collect();
            assert_eq!(got, &want, "rank {j} with quota {quota}");
        }
    }

    #[test]
    fn chunked_alltoallv_delivers_what_a_single_call_would() {
        let counts = vec![vec![0, 7, 1], vec![13, 0, 0], vec![2, 5, 9]];
        let limits = Limits {
            max_count: 7,
            round_bytes: u64::MAX,
        };
        let quota = limits.pair_quota(3, 8);
        assert_eq!(quota, 2);
        simulate(&counts, quota, limits.max_count);
        for quota in [1, 3, 13, 100] {
            simulate(&counts, quota, u64::MAX);
        }
        // Many ranks, some empty rows.
        let p = 6;
        let counts: Vec<Vec<u64>> = (0..p)
            .map(|i| {
                (0..p)
                    .map(|j| ((i * 7 + j * 3) % 11) as u64 * (i % 2) as u64)
                    .collect()
            })
            .collect();
        simulate(&counts, 1, 6);
        simulate(&counts, 4, 24);
    }
}
