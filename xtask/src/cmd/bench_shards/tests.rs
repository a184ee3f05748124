use super::dataset::Rng;
use super::*;

#[test]
fn rng_fills_every_byte() {
    let mut buf = [0u8; 13];
    Rng(1).fill(&mut buf);
    assert!(buf[8..].iter().any(|&b| b != 0), "{buf:?}");
}

/// The synthetic dataset passes dglrun's own checks, and every worker's
/// file list is what the partitioner's manifest gives that worker.
#[test]
fn synthetic_dataset_is_what_dglrun_serves() {
    let ws = std::env::temp_dir().join(format!("bench-shards-test-{}", std::process::id()));
    let shards = generate_dataset(&ws, 3, 3 * MIB + 5).unwrap();
    let layout = dglrun::dataset::Layout::new(&ws, GRAPH);
    let checked = layout.check_all(3);
    let manifest = layout.build_manifest(3);
    std::fs::remove_dir_all(&ws).unwrap();
    assert_eq!(checked.unwrap().referenced.len(), 9);
    let manifest = manifest.unwrap();
    for (i, files) in shards.iter().enumerate() {
        let mut want: Vec<(String, u64)> = manifest
            .shard_files(i as u32)
            .into_iter()
            .map(|f| (f.path, f.size))
            .collect();
        let mut got: Vec<(String, u64)> = files.iter().map(|f| (f.rel.clone(), f.size)).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
    let total: u64 = shards.iter().flatten().map(|f| f.size).sum();
    assert!(total >= 3 * MIB, "{total}");
}
