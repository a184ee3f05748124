//! The benchmarks' charts: SVG files drawn from the results JSON each bench
//! writes (`--json`), next to it, so that a chart never holds a figure its
//! JSON does not. plotters' SVG backend writes text as `<text>` elements: no
//! font library is needed to draw them (the viewer picks the font).
//!
//! Two shapes cover the four benches: panels of grouped bars (a value per
//! category and series, one panel per unit) and a line chart (a value per x).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

const FONT: &str = "sans-serif";
/// Series colours, in order (plotters' Palette99 is hard to tell apart on
/// few series).
const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];
const GIB: f64 = (1u64 << 30) as f64;

/// One series of a chart: a name for the legend, a value per category
/// (bars: `None` for a missing value) or per point (lines: `x` in `points`).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// Grouped bars in one unit: `series[j].values[i]` is the bar of series j
/// in category i.
#[derive(Debug, Clone, PartialEq)]
pub struct BarPanel {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
}

/// `chart.svg` beside `results.json`, or `results-<suffix>.svg`.
pub fn svg_path(json: &Path, suffix: Option<&str>) -> PathBuf {
    match suffix {
        None => json.with_extension("svg"),
        Some(s) => {
            let stem = json
                .file_stem()
                .map_or("chart".into(), |s| s.to_string_lossy());
            json.with_file_name(format!("{stem}-{s}.svg"))
        }
    }
}

/// The JSON lines of a results file (each bench appends one or more per run).
pub fn read_lines(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!(
                    "{} line {}: expected one JSON object",
                    path.display(),
                    i + 1
                )
            })
        })
        .collect()
}

/// Panels of grouped bars side by side under one caption.
pub fn draw_bars(path: &Path, caption: &str, panels: &[BarPanel]) -> Result<()> {
    if panels.is_empty() {
        bail!("{}: no panel to draw", path.display());
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let width = 40 + 420 * panels.len() as u32;
    let root = SVGBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(caption, (FONT, 20)).map_err(|e| err(&e))?;
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        bar_panel(area, panel).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn bar_panel(area: &Area, p: &BarPanel) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let n = p.categories.len().max(1);
    let top = p
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let top = if top > 0.0 { top * 1.2 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(p.y_label.as_str())
        // The categories are written under their bars below, not at ticks.
        .x_labels(0)
        .label_style((FONT, 12))
        .draw()?;
    let under = (FONT, 12)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    chart.draw_series(p.categories.iter().enumerate().map(|(i, c)| {
        EmptyElement::at((i as f64 + 0.5, 0.0)) + Text::new(c.clone(), (0, 6), under.clone())
    }))?;
    let k = p.series.len().max(1) as f64;
    let w = 0.8 / k;
    for (j, s) in p.series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let bars = s.values.iter().enumerate().filter_map(|(i, v)| {
            let x0 = i as f64 + 0.1 + j as f64 * w;
            v.map(|v| Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], color.filled()))
        });
        chart
            .draw_series(bars)?
            .label(s.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        // The figure on each bar, so the chart reads without the table.
        let labels = s.values.iter().enumerate().filter_map(|(i, v)| {
            let x = i as f64 + 0.1 + (j as f64 + 0.45) * w;
            v.map(|v| {
                Text::new(
                    short(v),
                    (x, v + top * 0.02),
                    (FONT, 11)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            })
        });
        chart.draw_series(labels)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()
}

/// A figure as a bar label: 3 significant digits at most.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Lines over a numeric x (points marked); `series[j].values[i]` is the y at
/// `xs[i]`.
pub fn draw_lines(
    path: &Path,
    caption: &str,
    (x_label, y_label): (&str, &str),
    xs: &[f64],
    series: &[Series],
) -> Result<()> {
    if xs.is_empty() {
        bail!("{}: no point to draw", path.display());
    }
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let x_lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let x_hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((x_hi - x_lo) * 0.1).max(0.5);
    let top = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let top = if top > 0.0 { top * 1.2 } else { 1.0 };
    let root = SVGBackend::new(path, (720, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FONT, 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x_lo - pad..x_hi + pad, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        // Rank counts are whole numbers: no label between them.
        .x_label_formatter(&|x| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .label_style((FONT, 12))
        .draw()
        .map_err(|e| err(&e))?;
    for (j, s) in series.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(&s.values)
            .filter_map(|(&x, v)| v.map(|v| (x, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 12))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// `cargo xtask bench partition`, one run (a line of its `--json`): wall
/// time and peak memory of each tool.
pub fn partition(run: &Value, path: &Path) -> Result<()> {
    let rows = run["rows"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| anyhow!("partition results: expected a non-empty \"rows\" array"))?;
    let tools: Vec<String> = rows
        .iter()
        .map(|r| tool_label(r["tool"].as_str().unwrap_or("?")))
        .collect();
    let ok = |r: &Value| r["ok"].as_bool() == Some(true);
    let wall: Vec<Option<f64>> = rows
        .iter()
        .map(|r| ok(r).then(|| r["wall_s"].as_f64()).flatten())
        .collect();
    let rss: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r["peak_rss"].as_f64().map(|b| b / GIB))
        .collect();
    let caption = format!(
        "Partitioning: R-MAT {} nodes, {} raw edges, {} features, {} parts",
        run["nodes"], run["edges"], run["feat"], run["parts"]
    );
    let panel = |title: &str, y: &str, name: &str, values| BarPanel {
        title: title.into(),
        y_label: y.into(),
        categories: tools.clone(),
        series: vec![Series {
            name: name.into(),
            values,
        }],
    };
    draw_bars(
        path,
        &caption,
        &[
            panel("Wall time", "seconds", "wall time (s)", wall),
            panel("Peak memory", "GiB", "peak RSS, process tree (GiB)", rss),
        ],
    )
}

/// The bench's tool names, short enough for an axis.
fn tool_label(tool: &str) -> String {
    if tool.starts_with("DGL") {
        "DGL partition_graph".into()
    } else if tool.starts_with("DistParMETIS") {
        "DistParMETIS ranks".into()
    } else if tool.starts_with("dglrun") {
        "dglrun (1 process)".into()
    } else {
        tool.into()
    }
}

/// Per-rank memory as ranks are added: from every run in the results file on
/// the same graph as `latest`, the newest per rank count; the single
/// process's peak of the same run beside it.
pub fn rank_memory(runs: &[Value], latest: &Value, path: &Path) -> Result<bool> {
    let same_graph = |r: &Value| ["nodes", "edges", "feat"].iter().all(|k| r[k] == latest[k]);
    let mut by_parts: std::collections::BTreeMap<u64, &Value> = Default::default();
    for r in runs.iter().filter(|r| same_graph(r)) {
        let dist = row_of(r, "DistParMETIS");
        if let (Some(p), Some(_)) = (r["parts"].as_u64(), dist.filter(|d| d["ok"] == true)) {
            by_parts.insert(p, r);
        }
    }
    if by_parts.is_empty() {
        return Ok(false);
    }
    let xs: Vec<f64> = by_parts.keys().map(|&p| p as f64).collect();
    let max_rank = |r: &Value| {
        row_of(r, "DistParMETIS")?["ranks"]
            .as_array()?
            .iter()
            .filter_map(|k| k["peak_rss"].as_f64())
            .reduce(f64::max)
            .map(|b| b / GIB)
    };
    let tree = |r: &Value| Some(row_of(r, "DistParMETIS")?["peak_rss"].as_f64()? / GIB);
    let single = |r: &Value| {
        let s = row_of(r, "dglrun")?;
        (s["ok"] == true).then(|| s["peak_rss"].as_f64().map(|b| b / GIB))?
    };
    let series = vec![
        Series {
            name: "largest rank's peak RSS".into(),
            values: by_parts.values().map(|r| max_rank(r)).collect(),
        },
        Series {
            name: "all ranks together (process tree)".into(),
            values: by_parts.values().map(|r| tree(r)).collect(),
        },
        Series {
            name: "single process (dglrun)".into(),
            values: by_parts.values().map(|r| single(r)).collect(),
        },
    ];
    let caption = format!(
        "DistParMETIS memory per rank: R-MAT {} nodes, {} raw edges",
        latest["nodes"], latest["edges"]
    );
    draw_lines(path, &caption, ("ranks (= parts)", "GiB"), &xs, &series)?;
    Ok(true)
}

fn row_of<'a>(run: &'a Value, prefix: &str) -> Option<&'a Value> {
    run["rows"]
        .as_array()?
        .iter()
        .find(|r| r["tool"].as_str().is_some_and(|t| t.starts_with(prefix)))
}

/// `cargo xtask bench scale`: one JSON line per phase of a run (ours in each
/// mode, mpi-operator with each queue limit), side by side.
pub fn scale(phases: &[Value], path: &Path) -> Result<()> {
    if phases.is_empty() {
        bail!("scale results: no phase to draw");
    }
    let f = |p: &Value, k: &str| p[k].as_f64();
    let series_of = |metric: &dyn Fn(&Value) -> Vec<Option<f64>>| {
        phases
            .iter()
            .map(|p| Series {
                name: phase_name(p),
                values: metric(p),
            })
            .collect::<Vec<_>>()
    };
    let per_job = |p: &Value, k: &str| {
        let n = p["jobs"].as_f64().filter(|&n| n > 0.0)?;
        Some(p[k].as_f64()? / n)
    };
    let first = &phases[0];
    let caption = format!(
        "Operator scale: {} jobs x {} workers on kwok nodes",
        first["jobs"], first["workers"]
    );
    draw_bars(
        path,
        &caption,
        &[
            BarPanel {
                title: "Time from the first job's creation".into(),
                y_label: "seconds".into(),
                categories: vec![
                    "last pod".into(),
                    "all Succeeded".into(),
                    "cleanup done".into(),
                ],
                series: series_of(&|p| {
                    vec![
                        f(p, "first_create_to_last_pod_s"),
                        f(p, "all_succeeded_s"),
                        f(p, "cleanup_done_s"),
                    ]
                }),
            },
            BarPanel {
                title: "Operator cost".into(),
                y_label: "CPU s / peak RSS MiB".into(),
                categories: vec!["CPU s until cleanup".into(), "peak RSS MiB".into()],
                series: series_of(&|p| {
                    vec![
                        f(p, "operator_cpu_until_cleanup_s"),
                        p["rss_mib"]["peak"].as_f64(),
                    ]
                }),
            },
            BarPanel {
                title: "API requests per job".into(),
                y_label: "requests".into(),
                categories: vec!["operator".into(), "all clients".into()],
                series: series_of(&|p| {
                    vec![
                        per_job(p, "operator_requests"),
                        per_job(p, "apiserver_requests"),
                    ]
                }),
            },
        ],
    )
}

fn phase_name(p: &Value) -> String {
    let subject = p["subject"].as_str().unwrap_or("?");
    match p["label"].as_str().filter(|l| !l.is_empty()) {
        Some(l) => format!("{subject} ({l})"),
        None => subject.to_string(),
    }
}

/// `cargo xtask bench-shards`: one JSON object per run, `rows` one per link
/// and worker count, with the median MB/s of dglrun and of the plain copy.
pub fn shards(run: &Value, path: &Path) -> Result<()> {
    let rows = run["rows"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| anyhow!("shard results: expected a non-empty \"rows\" array"))?;
    let categories = rows
        .iter()
        .map(|r| {
            format!(
                "{} workers, {}",
                r["workers"],
                r["link"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let col = |k: &str| rows.iter().map(|r| r[k].as_f64()).collect::<Vec<_>>();
    let caption = format!("Shard shipping: {} MiB to the workers", run["total_mib"]);
    draw_bars(
        path,
        &caption,
        &[BarPanel {
            title: "Throughput (median of the runs)".into(),
            y_label: "MB/s".into(),
            categories,
            series: vec![
                Series {
                    name: "dglrun (hashed, checked)".into(),
                    values: col("dglrun_mbps"),
                },
                Series {
                    name: "plain TCP copy".into(),
                    values: col("plain_mbps"),
                },
            ],
        }],
    )
}

#[cfg(test)]
mod tests;
