//! A small SVG line plot: median latency (log scale) against rank count, one line per series.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::row::Row;

const W: f64 = 820.0;
const H: f64 = 460.0;
const LEFT: f64 = 96.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// Marker shapes and dash patterns, cycled with the colors: two series that lie on top of each
/// other (the emulated switch and GBA) still read as two.
const DASHES: [&str; 4] = ["", "7 4", "2 3", "10 3 2 3"];

fn series_name(r: &Row) -> String {
    let base = match r.label.as_str() {
        "" => r.backend.clone(),
        l if l == r.backend && r.backend == barrier::backends::dissemination::NAME => format!("{l} (auto)"),
        l => l.to_string(),
    };
    if r.emulator_ns.is_some() {
        format!("{base} (emulated)")
    } else {
        base
    }
}

/// A marker of shape `k` at (x, y).
fn marker(k: usize, x: f64, y: f64, color: &str, title: &str) -> String {
    let t = format!("<title>{title}</title>");
    match k % 4 {
        0 => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}">{t}</circle>"#),
        1 => format!(r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{color}">{t}</rect>"#, x - 3.5, y - 3.5),
        2 => format!(
            r#"<polygon points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}">{t}</polygon>"#,
            y - 4.5,
            x - 4.5,
            y + 3.5,
            x + 4.5,
            y + 3.5
        ),
        _ => format!(
            r#"<polygon points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}" fill="white" stroke="{color}" stroke-width="2">{t}</polygon>"#,
            y - 5.0,
            x + 5.0,
            y + 5.0,
            x - 5.0
        ),
    }
}

/// Renders the rows as an SVG document: median ns per barrier (log scale) against ranks, one
/// line per series; the floor as a dashed horizontal line; rank counts above `cores` shaded.
///
/// `caption` (the machine, the date, the iterations and rounds) is written under the plot.
pub fn svg(rows: &[Row], cores: usize, caption: &str) -> String {
    draw(rows, None, cores, "ranks", ("median ns per barrier", "median latency per barrier (ns)"), caption)
}

/// Renders `barrier model --sweep`'s predictions: ns per barrier (log scale) against nodes (the
/// rows' `ranks`), one line per backend; no floor and no core count.
pub fn svg_by_nodes(rows: &[Row], caption: &str) -> String {
    draw(rows, None, usize::MAX, "nodes", ("predicted ns per barrier", "predicted latency per barrier (ns)"), caption)
}

/// `y_names`: the title's words and the axis label.
fn draw(rows: &[Row], floor: Option<f64>, cores: usize, x_name: &str, y_names: (&str, &str), caption: &str) -> String {
    let (y_name, y_axis) = y_names;
    let floor_ns = floor.unwrap_or(f64::NAN);
    let mut series: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
    // The floor rows are a series of their own (a latency only where the ranks fit the cores).
    let rows: Vec<&Row> = rows.iter().filter(|r| r.stats.median.is_finite()).collect();
    for r in &rows {
        series.entry(series_name(r)).or_default().push((r.ranks, r.stats.median.max(0.1)));
    }
    let xs: Vec<f64> = rows.iter().map(|r| (r.ranks.max(1) as f64).log2()).collect();
    let (xmin, xmax) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let ys: Vec<f64> =
        rows.iter().map(|r| r.stats.median.max(0.1).log10()).chain(floor.map(|f| f.max(0.1).log10())).collect();
    let (ymin, ymax) =
        (ys.iter().cloned().fold(f64::MAX, f64::min).floor(), ys.iter().cloned().fold(f64::MIN, f64::max).ceil());
    let xr = if xmax > xmin { xmax - xmin } else { 1.0 };
    let yr = if ymax > ymin { ymax - ymin } else { 1.0 };
    let px = |ranks: f64| LEFT + (ranks.max(1.0).log2() - xmin) / xr * (W - LEFT - RIGHT);
    let py = |ns: f64| TOP + (1.0 - (ns.max(0.1).log10() - ymin) / yr) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{}" font-size="10" fill="gray">{}</text>"#,
        H - 4.0,
        caption.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
    );
    let _ = writeln!(s, r#"<text x="{LEFT}" y="18" font-size="14">barrier latency: {y_name} (log scale)</text>"#);
    // More ranks than cores: the ranks take turns on the cores (they yield and park).
    let max_ranks = rows.iter().map(|r| r.ranks).max().unwrap_or(1);
    if max_ranks > cores {
        let x0 = (px(cores as f64) + px(cores as f64 + 1.0)) / 2.0;
        let x0 = x0.max(LEFT);
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#f4f0e6"/>"##,
            (W - RIGHT - x0).max(0.0),
            H - TOP - BOTTOM
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#8a7a50">more ranks than the {cores} cores</text>"##,
            x0 + 4.0,
            TOP + 14.0
        );
    }
    // Axes and grid.
    let mut decade = ymin;
    while decade <= ymax + 1e-9 {
        let ns = 10f64.powf(decade);
        let y = py(ns);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{ns} ns</text>"#, LEFT - 6.0, y + 4.0);
        decade += 1.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">{y_axis}</text>"#,
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0
    );
    let mut ranks: Vec<usize> = rows.iter().map(|r| r.ranks).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for n in &ranks {
        let x = px(*n as f64);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/>"##, H - BOTTOM);
        let _ = writeln!(s, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{n}</text>"#, H - BOTTOM + 16.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x_name}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    // The floor: what any two-party barrier costs at least on this machine.
    if floor.is_some() {
        let fy = py(floor_ns);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{fy:.1}" x2="{:.1}" y2="{fy:.1}" stroke="#000" stroke-width="1.5" stroke-dasharray="4 4"/>"##,
            W - RIGHT
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">floor {floor_ns:.1} ns</text>"#, LEFT + 4.0, fy - 5.0);
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dash = DASHES[i % DASHES.len()];
        let path: Vec<String> = pts.iter().map(|(n, ns)| format!("{:.1},{:.1}", px(*n as f64), py(*ns))).collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}" points="{}"/>"#,
            path.join(" ")
        );
        for (n, ns) in pts {
            let _ = writeln!(
                s,
                "{}",
                marker(i, px(*n as f64), py(*ns), color, &format!("{name}: {n} {x_name}, {ns:.1} ns"))
            );
        }
        let ly = TOP + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
            W - RIGHT + 8.0,
            W - RIGHT + 34.0
        );
        let _ = writeln!(s, "{}", marker(i, W - RIGHT + 21.0, ly, color, name));
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">{name}</text>"#, W - RIGHT + 40.0, ly + 4.0);
    }
    s.push_str("</svg>\n");
    s
}
