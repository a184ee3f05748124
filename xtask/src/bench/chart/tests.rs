use super::*;
use serde_json::json;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-chart-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The SVG parses as XML, and every text of `want` is in one of its
/// `<text>` elements (not merely somewhere in the markup).
fn assert_svg(path: &Path, want: &[&str]) {
    let svg = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&svg)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").to_string())
        .collect();
    for w in want {
        assert!(
            texts.iter().any(|t| t.contains(w)),
            "{w:?} is not a text of {}: {texts:?}",
            path.display()
        );
    }
    let bars = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert!(
        bars + lines > 1,
        "no bar or line drawn in {}",
        path.display()
    );
}

fn partition_run(parts: u64, rank_gib: f64) -> Value {
    let gib = |g: f64| (g * GIB) as u64;
    let ranks: Vec<Value> = (0..parts)
        .map(|r| json!({"rank": r, "peak_rss": gib(rank_gib + r as f64 * 0.01)}))
        .collect();
    json!({
        "nodes": 20000, "edges": 200000, "feat": 16, "parts": parts, "load": "1 1 1",
        "rows": [
            {"tool": "DGL partition_graph (METIS)", "ok": true, "wall_s": 9.5, "peak_rss": gib(1.5), "ranks": []},
            {"tool": "dglrun partition (ParMETIS mode)", "ok": true, "wall_s": 2.25, "peak_rss": gib(0.5), "ranks": []},
            {"tool": "DistParMETIS ranks (mpirun, 1 machine)", "ok": true, "wall_s": 3.0,
             "peak_rss": gib(rank_gib * parts as f64), "ranks": ranks},
        ]
    })
}

#[test]
fn partition_chart_names_each_tool_and_axis() {
    let dir = tmp("partition");
    let json_path = dir.join("partition.json");
    let svg = svg_path(&json_path, None);
    assert_eq!(svg, dir.join("partition.svg"));
    partition(&partition_run(4, 0.2), &svg).unwrap();
    assert_svg(
        &svg,
        &[
            "DGL partition_graph",
            "dglrun (1 process)",
            "DistParMETIS ranks",
            "wall time (s)",
            "peak RSS, process tree (GiB)",
            "seconds",
            "GiB",
            "20000 nodes",
            // The figures are on the bars.
            "9.50",
            "2.25",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn partition_results_without_rows_is_an_error() {
    let dir = tmp("norows");
    let err = partition(&json!({"nodes": 1}), &dir.join("x.svg")).unwrap_err();
    assert!(err.to_string().contains("\"rows\""), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs at 2, 4 and 8 ranks on the same graph become one line each; a run
/// on another graph is left out, and a later run at 4 ranks replaces the
/// earlier one.
#[test]
fn rank_memory_chart_takes_the_newest_run_per_rank_count() {
    let dir = tmp("ranks");
    let json_path = dir.join("partition.json");
    let mut other = partition_run(16, 9.0);
    other["nodes"] = json!(1);
    let runs = [
        partition_run(2, 0.3),
        partition_run(4, 7.0),
        partition_run(4, 0.2),
        partition_run(8, 0.15),
        other,
    ];
    let text: String = runs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&json_path, text).unwrap();
    let read = read_lines(&json_path).unwrap();
    assert_eq!(read.len(), 5);
    let svg = svg_path(&json_path, Some("ranks"));
    assert_eq!(svg, dir.join("partition-ranks.svg"));
    assert!(rank_memory(&read, &read[3], &svg).unwrap());
    assert_svg(
        &svg,
        &[
            "largest rank's peak RSS",
            "all ranks together (process tree)",
            "single process (dglrun)",
            "ranks (= parts)",
            "GiB",
        ],
    );
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&svg_text).unwrap();
    // One marker per rank count and series: 3 counts (16 is another graph).
    let circles = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert_eq!(circles, 9, "{svg_text}");
    // The y axis ends 20 % over the highest point: the 7 GiB run was
    // replaced. (Its tick labels have decimals; the rank counts have none.)
    let y_ticks: Vec<f64> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().filter(|t| t.contains('.')))
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    let top = y_ticks.iter().copied().fold(0.0, f64::max);
    assert!((1.0..7.0).contains(&top), "{y_ticks:?}");
    let x_ticks: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| Some(n.text()?.trim()))
        .filter(|t| ["2", "4", "8", "16"].contains(t))
        .collect();
    assert!(!x_ticks.contains(&"16"), "{x_ticks:?}");
    assert!(
        x_ticks.contains(&"2") && x_ticks.contains(&"8"),
        "{x_ticks:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rank_memory_chart_is_skipped_without_ranks() {
    let dir = tmp("noranks");
    let mut run = partition_run(4, 0.2);
    run["rows"].as_array_mut().unwrap().pop();
    let svg = dir.join("r.svg");
    assert!(!rank_memory(std::slice::from_ref(&run), &run, &svg).unwrap());
    assert!(!svg.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_results_line_names_the_file_and_line() {
    let dir = tmp("badline");
    let p = dir.join("r.json");
    std::fs::write(&p, "{\"a\": 1}\nnot json\n").unwrap();
    let err = format!("{:#}", read_lines(&p).unwrap_err());
    assert!(err.contains("r.json line 2"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn scale_chart_has_a_series_per_phase() {
    let dir = tmp("scale");
    let phase = |subject: &str, secs: f64| {
        json!({
            "label": "", "subject": subject, "jobs": 100, "workers": 4,
            "first_create_to_last_pod_s": secs, "all_succeeded_s": secs + 3.0,
            "cleanup_done_s": secs + 5.0, "operator_cpu_until_cleanup_s": 1.5,
            "rss_mib": {"idle": 20.0, "peak": 40.0}, "operator_requests": 900.0,
            "apiserver_requests": 2000.0,
        })
    };
    let svg = dir.join("scale.svg");
    scale(
        &[
            phase("ours, Skip", 4.0),
            phase("mpi-operator, default queue", 40.0),
        ],
        &svg,
    )
    .unwrap();
    assert_svg(
        &svg,
        &[
            "ours, Skip",
            "mpi-operator, default queue",
            "seconds",
            "API requests per job",
            "all Succeeded",
            "100 jobs x 4 workers",
            // 900 requests over 100 jobs.
            "9.00",
        ],
    );
    assert!(scale(&[], &svg).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shards_chart_compares_dglrun_with_the_plain_copy() {
    let dir = tmp("shards");
    let run = json!({
        "total_mib": 64,
        "rows": [
            {"workers": 2, "link": "unshaped", "dglrun_mbps": 812.0, "plain_mbps": 990.0},
            {"workers": 4, "link": "10 Gbit/s", "dglrun_mbps": 1100.0, "plain_mbps": 1150.0},
        ]
    });
    let svg = dir.join("shards.svg");
    shards(&run, &svg).unwrap();
    assert_svg(
        &svg,
        &[
            "dglrun (hashed, checked)",
            "plain TCP copy",
            "MB/s",
            "2 workers, unshaped",
            "4 workers, 10 Gbit/s",
            "812",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
