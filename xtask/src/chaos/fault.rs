//! The faults (`Fault`, one per scenario) and what a scenario reports
//! (`Outcome`): what the chaos modules share; imports none of them.
use std::time::Duration;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    OperatorKill,
    WorkerDelete,
    Churn,
    ApiserverRestart,
    EtcdPause,
    KubeletRestart,
    PartitionerKill,
    ShardCorrupt,
    NetworkCut,
    Evict,
    Drain,
    KubeletHang,
    TokenDelete,
    /// A worker's node cut off the network mid-training (needs 2 nodes).
    NodeLoss,
    /// The partitioner's node cut off the network while it partitions (needs 2 nodes).
    NodeLossPartitioning,
}

impl Fault {
    pub const ALL: [Fault; 15] = [
        Fault::OperatorKill,
        Fault::WorkerDelete,
        Fault::Churn,
        Fault::ApiserverRestart,
        Fault::EtcdPause,
        Fault::KubeletRestart,
        Fault::PartitionerKill,
        Fault::ShardCorrupt,
        Fault::NetworkCut,
        Fault::Evict,
        Fault::Drain,
        Fault::KubeletHang,
        Fault::TokenDelete,
        Fault::NodeLoss,
        Fault::NodeLossPartitioning,
    ];
}

/// What one run of a scenario saw: the time to the job's terminal state,
/// the objects left behind, a note for the table.
pub(crate) struct Outcome {
    pub terminal: Option<Duration>,
    pub left: usize,
    pub note: String,
}
