//! A small SVG line plot: median latency (log scale) against rank count, one line per series.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::bench::Row;

const W: f64 = 820.0;
const H: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

fn series_name(r: &Row) -> String {
    match r.label.as_str() {
        "" => r.backend.clone(),
        l if l == r.backend && r.backend == barrier::backends::software::NAME => format!("{l} (auto)"),
        l => l.to_string(),
    }
}

/// Renders the rows as an SVG document.
pub fn svg(rows: &[Row], floor_ns: f64) -> String {
    let mut series: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
    for r in rows {
        series.entry(series_name(r)).or_default().push((r.ranks, r.stats.median.max(0.1)));
    }
    let xs: Vec<f64> = rows.iter().map(|r| (r.ranks.max(1) as f64).log2()).collect();
    let (xmin, xmax) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let ys: Vec<f64> = rows.iter().map(|r| r.stats.median.max(0.1).log10()).collect();
    let (ymin, ymax) =
        (ys.iter().cloned().fold(f64::MAX, f64::min).floor(), ys.iter().cloned().fold(f64::MIN, f64::max).ceil());
    let xr = if xmax > xmin { xmax - xmin } else { 1.0 };
    let yr = if ymax > ymin { ymax - ymin } else { 1.0 };
    let px = |ranks: usize| LEFT + ((ranks.max(1) as f64).log2() - xmin) / xr * (W - LEFT - RIGHT);
    let py = |ns: f64| TOP + (1.0 - (ns.max(0.1).log10() - ymin) / yr) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" font-size="14">barrier latency (median ns, log scale); floor {floor_ns:.1} ns</text>"#,
        LEFT
    );
    // Axes and grid.
    let mut decade = ymin;
    while decade <= ymax + 1e-9 {
        let ns = 10f64.powf(decade);
        let y = py(ns);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, ns);
        decade += 1.0;
    }
    let mut ranks: Vec<usize> = rows.iter().map(|r| r.ranks).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for n in &ranks {
        let x = px(*n);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/>"##, H - BOTTOM);
        let _ = writeln!(s, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{n}</text>"#, H - BOTTOM + 16.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">ranks</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts.iter().map(|(n, ns)| format!("{:.1},{:.1}", px(*n), py(*ns))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for (n, ns) in pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{name}: {n} ranks, {ns:.1} ns</title></circle>"#,
                px(*n),
                py(*ns)
            );
        }
        let ly = TOP + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="4" fill="{color}"/>"#,
            W - RIGHT + 12.0,
            ly - 4.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">{name}</text>"#, W - RIGHT + 30.0, ly + 1.0);
    }
    s.push_str("</svg>\n");
    s
}
