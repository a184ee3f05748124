//! What a driver did, for its log and the benchmarks: one report for both
//! drivers, its lines the same as each has always printed (dglrun and
//! `cargo xtask bench partition` read them).

use std::path::PathBuf;

use crate::assign::Quality;
use crate::input::Fetched;
use crate::output::json::part_dir;
use crate::shuffle_write::{PartSummary, Summary};
use crate::stages::Stages;

/// The stages, the graph's size, the assignment's quality and what was
/// written.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Wall time of each stage (and CPU time, in one process).
    pub stages: Stages,
    pub num_nodes: u64,
    pub num_edges: u64,
    /// The assignment's quality (a rank: rank 0 only).
    pub quality: Option<Quality>,
    pub written: Written,
    /// What the read fetched from object storage (zero for local files).
    pub fetched: Fetched,
}

/// The parts this process wrote.
#[derive(Clone, Debug, Default)]
pub enum Written {
    /// Nothing yet.
    #[default]
    Nothing,
    /// Every part, by one process (partition mode ParMETIS).
    All(Summary),
    /// Rank `rank` of `world`'s own part (partition mode DistParMETIS).
    Own {
        world: u32,
        part: PartSummary,
        json: PathBuf,
    },
}

impl Report {
    /// The parts this process wrote.
    pub fn parts(&self) -> &[PartSummary] {
        match &self.written {
            Written::Nothing => &[],
            Written::All(s) => &s.parts,
            Written::Own { part, .. } => std::slice::from_ref(part),
        }
    }

    /// One line per stage, the totals, the quality, then what was written.
    pub fn lines(&self) -> Vec<String> {
        let mut out = self.stages.lines();
        let by = match &self.written {
            Written::Own { world, .. } => format!(" by {world} ranks"),
            _ => String::new(),
        };
        out.push(format!(
            "{} nodes, {} edges partitioned{by} in {:.2}s",
            self.num_nodes,
            self.num_edges,
            self.stages.total().as_secs_f64()
        ));
        if let Some(q) = &self.quality {
            out.push(format!("{q}"));
        }
        if self.fetched.requests > 0 {
            out.push(format!(
                "input fetched from object storage: {} bytes in {} requests",
                self.fetched.bytes, self.fetched.requests
            ));
        }
        match &self.written {
            Written::Nothing => {}
            Written::All(s) => out.extend(summary_lines(s)),
            Written::Own { part, json, .. } => out.push(format!(
                "{} in {}",
                part_line(part),
                json.with_file_name(part_dir(part.part)).display()
            )),
        }
        out
    }
}

fn part_line(p: &PartSummary) -> String {
    format!(
        "part {}: {} inner nodes, {} halo nodes, {} edges, {} bytes",
        p.part, p.inner_nodes, p.halo_nodes, p.edges, p.bytes
    )
}

fn summary_lines(s: &Summary) -> Vec<String> {
    let t = &s.timings;
    let mut out = vec![format!(
        "shuffle and write: ids {:.2}s, partitions built and written (features, graph.dgl) {:.2}s, publish {:.2}s",
        t.ids.as_secs_f64(),
        t.parts.as_secs_f64(),
        t.publish.as_secs_f64()
    )];
    out.extend(s.parts.iter().map(part_line));
    out.push(format!(
        "wrote {} ({} bytes)",
        s.json.display(),
        s.bytes_written
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn part(p: u32) -> PartSummary {
        PartSummary {
            part: p,
            inner_nodes: 10,
            halo_nodes: 2,
            edges: 30,
            bytes: 999,
            ..Default::default()
        }
    }

    fn report(written: Written) -> Report {
        let mut stages = Stages::default();
        stages.list.push(("read", Duration::from_millis(1500)));
        Report {
            stages,
            num_nodes: 10,
            num_edges: 30,
            quality: None,
            written,
            fetched: Fetched::default(),
        }
    }

    #[test]
    fn a_ranks_lines_name_the_ranks_and_its_part_folder() {
        let r = report(Written::Own {
            world: 2,
            part: part(1),
            json: PathBuf::from("/ws/dataset/g.json"),
        });
        assert_eq!(
            r.lines(),
            [
                "stage read: 1.50s",
                "10 nodes, 30 edges partitioned by 2 ranks in 1.50s",
                "part 1: 10 inner nodes, 2 halo nodes, 30 edges, 999 bytes in /ws/dataset/part1",
            ]
        );
        assert_eq!(r.parts().len(), 1);
    }

    #[test]
    fn one_process_lists_every_part_and_the_json() {
        let s = Summary {
            json: PathBuf::from("/o/g.json"),
            parts: vec![part(0), part(1)],
            bytes_written: 2100,
            ..Default::default()
        };
        let lines = report(Written::All(s)).lines();
        assert_eq!(lines[1], "10 nodes, 30 edges partitioned in 1.50s");
        assert!(
            lines[2].starts_with("shuffle and write: ids 0.00s"),
            "{lines:?}"
        );
        assert_eq!(
            lines[4],
            "part 1: 10 inner nodes, 2 halo nodes, 30 edges, 999 bytes"
        );
        assert_eq!(lines[5], "wrote /o/g.json (2100 bytes)");
        assert!(report(Written::Nothing).parts().is_empty());
    }
}
