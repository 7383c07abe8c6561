//! The report's figures, drawn with plotters' SVG backend.
//!
//! - `overestimate.svg`: how far a count-min sketch's estimates are above the true counts,
//!   against the sketch's width, next to the count-min bound. A fixed stream of 1,000,000
//!   keys drawn from a Zipf distribution (s = 1.0 over 1,000,000 keys, seeded, so every run
//!   sees the same stream) is fed into a floodgate [`Estimator`] of H rows × N columns for
//!   N = 2^8 … 2^16 and H = 4 and 2; for every distinct key of the stream the over-estimate is
//!   `estimate − true count` (never negative: checked). The chart shows their mean and 99th
//!   percentile on log-log axes, with the bound ε·total = (e/N)·total: with probability at
//!   least 1 − δ = 1 − e^−H a key's over-estimate is at most that (Cormode & Muthukrishnan,
//!   2005). Beside them, the limiter's blocked layout (a key's rows in one 64-byte line of 16
//!   `u32` counters), with 4 rows and with its default 2, each in the memory of the flat
//!   table of its depth: 2N counters per row. Its rows share
//!   their line's other keys, so the bound (which assumes independent rows) is drawn for the
//!   flat table only; the table counts the keys over ε·total for each. The same figures go
//!   to the report as a Markdown table. The hash keys are random per instance (by design), so
//!   the figures vary a little from run to run.
//! - `ns_per_op.svg`: median ns per operation of each structure, one panel per part (and per
//!   simulated rate), from the results the report read.

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;

use floodgate::{BlockedEstimator, Estimator};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};

/// Keys are Zipf ranks in `1..=KEYS`.
const KEYS: u64 = 1_000_000;
/// Increments in the stream (the sketch's total count).
const STREAM: usize = 1_000_000;
/// Sketch widths 2^8 … 2^16.
const WIDTH_BITS: std::ops::RangeInclusive<u32> = 8..=16;
/// Sketch depths, each drawn as its own pair of series.
const DEPTHS: [usize; 2] = [4, 2];
const SEED: u64 = 0x0f10_0d6a_7e01;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

// ---- over-estimation ----

/// The over-estimates of one sketch size, over the distinct keys of the stream.
pub struct Overestimate {
    /// The limiter's blocked layout, in the memory of the flat `rows × columns / 2`.
    blocked: bool,
    rows: usize,
    columns: usize,
    mean: f64,
    p99: i64,
    max: i64,
    /// Keys whose over-estimate is above ε·total.
    over_bound: usize,
    keys: usize,
}

impl Overestimate {
    fn epsilon(&self) -> f64 {
        std::f64::consts::E / self.columns as f64
    }

    fn bound(&self) -> f64 {
        self.epsilon() * STREAM as f64
    }

    fn delta(&self) -> f64 {
        (-(self.rows as f64)).exp()
    }
}

pub fn overestimates() -> Vec<Overestimate> {
    let zipf = Zipf::new(KEYS, 1.0).expect("valid Zipf parameters");
    let mut rng = StdRng::seed_from_u64(SEED);
    let stream: Vec<u64> = (0..STREAM).map(|_| zipf.sample(&mut rng) as u64).collect();
    let mut truth = vec![0i64; KEYS as usize + 1];
    for &key in &stream {
        truth[key as usize] += 1;
    }
    let distinct: Vec<u64> = (1..=KEYS).filter(|&k| truth[k as usize] > 0).collect();

    let mut results = Vec::new();
    // The flat tables of each depth, then the blocked ones (4 rows, and the limiter's default
    // 2) in the memory of the flat table of the same depth.
    let shapes = DEPTHS
        .into_iter()
        .map(|rows| (false, rows))
        .chain([(true, DEPTHS[0]), (true, DEPTHS[1])]);
    for (blocked, rows) in shapes {
        for bits in WIDTH_BITS {
            // u32 counters where the flat table's are 8 bytes: twice the columns.
            let columns = (1usize << bits) << usize::from(blocked);
            let estimate: Box<dyn Fn(u64) -> isize> = if blocked {
                let sketch = BlockedEstimator::try_new(rows, columns).expect("a valid size");
                let flat_bytes = rows * (columns / 2) * std::mem::size_of::<isize>();
                assert!(sketch.memory_bytes() <= flat_bytes + 1024, "equal memory");
                for &key in &stream {
                    sketch.incr(key, 1);
                }
                Box::new(move |key| sketch.get(key))
            } else {
                let sketch = Estimator::new(rows, columns);
                for &key in &stream {
                    sketch.incr(key, 1);
                }
                Box::new(move |key| sketch.get(key))
            };
            let mut over: Vec<i64> = distinct
                .iter()
                .map(|&key| {
                    let over = estimate(key) as i64 - truth[key as usize];
                    assert!(over >= 0, "key {key} under-counted by {}", -over);
                    over
                })
                .collect();
            over.sort_unstable();
            let n = over.len();
            let mut row = Overestimate {
                blocked,
                rows,
                columns,
                mean: over.iter().sum::<i64>() as f64 / n as f64,
                p99: over[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1],
                max: over[n - 1],
                over_bound: 0,
                keys: n,
            };
            let bound = row.bound();
            row.over_bound = over.iter().filter(|&&o| o as f64 > bound).count();
            results.push(row);
        }
    }
    results
}

/// The over-estimation table: its heading line and its Markdown rows.
pub fn overestimate_table(rows: &[Overestimate]) -> (String, Vec<String>) {
    let heading = format!(
        "Over-estimation: Zipf s=1.0 over {} keys, {} increments (seeded), {} distinct \
         keys; per key, estimate − true count.",
        crate::thousands(KEYS),
        crate::thousands(STREAM as u64),
        crate::thousands(rows.first().map_or(0, |r| r.keys as u64))
    );
    let mut table = vec![
        "| layout | H × N | ε = e/N | bound ε·total | mean | p99 | max | keys over the bound | \
         δ = e^−H |"
            .to_string(),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|".to_string(),
    ];
    for r in rows {
        table.push(format!(
            "| {} | {}×{} | {:.2e} | {:.1} | {:.2} | {} | {} | {:.3}% | {:.2}% |",
            if r.blocked {
                "blocked (limiter), memory of flat H × N/2"
            } else {
                "flat (Estimator)"
            },
            r.rows,
            r.columns,
            r.epsilon(),
            r.bound(),
            r.mean,
            r.p99,
            r.max,
            100.0 * r.over_bound as f64 / r.keys as f64,
            100.0 * r.delta(),
        ));
    }
    (heading, table)
}

pub(crate) const BLUE_DARK: RGBColor = RGBColor(31, 119, 180);
pub(crate) const ORANGE: RGBColor = RGBColor(230, 85, 13);
pub(crate) const GREEN_DARK: RGBColor = RGBColor(44, 160, 44);
pub(crate) const PURPLE: RGBColor = RGBColor(117, 107, 177);

pub fn draw_overestimates(rows: &[Overestimate], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (1000, 680)).into_drawing_area();
    root.fill(&WHITE)?;
    let widths: Vec<f64> = WIDTH_BITS.map(|b| f64::from(1u32 << b)).collect();
    // Log axes: leave out zero means and percentiles (a perfect sketch has nothing to plot).
    let positive = rows
        .iter()
        .flat_map(|r| [r.mean, r.p99 as f64, r.bound()])
        .filter(|&v| v > 0.0);
    let (low, high) = positive.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // Whole decades, so that both ends of the y axis carry a label.
    let (low, high) = (
        10f64.powf(low.log10().floor()),
        10f64.powf(high.log10().ceil()),
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Count-min over-estimate per key vs sketch width \
                 (Zipf s=1.0, {} increments over {} keys)",
                crate::thousands(STREAM as u64),
                crate::thousands(KEYS)
            ),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(
            (widths[0] / 1.25..widths[widths.len() - 1] * 1.25)
                .log_scale()
                .with_key_points(widths.clone()),
            (low..high).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("sketch width N (columns per row of the flat table)")
        .y_desc("estimate − true count")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y}")
            }
        })
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    let bound: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.rows == DEPTHS[0] && !r.blocked)
        .map(|r| (r.columns as f64, r.bound()))
        .collect();
    chart
        .draw_series(LineSeries::new(bound, BLACK.stroke_width(3)))?
        .label("bound ε·total = (e/N)·total")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(3)));

    // Each series at the flat table's N: the blocked one in the memory of the flat 4 × N.
    let series = [
        (false, DEPTHS[0], BLUE_DARK, format!("H = {}", DEPTHS[0])),
        (false, DEPTHS[1], ORANGE, format!("H = {}", DEPTHS[1])),
        (
            true,
            DEPTHS[0],
            GREEN_DARK,
            format!("blocked H = {} (2N, same memory)", DEPTHS[0]),
        ),
        (
            true,
            DEPTHS[1],
            PURPLE,
            format!("blocked H = {} (2N, same memory; the limiter's)", DEPTHS[1]),
        ),
    ];
    for (blocked, depth, color, name) in series {
        let of_shape: Vec<&Overestimate> = rows
            .iter()
            .filter(|r| r.rows == depth && r.blocked == blocked)
            .collect();
        let width = |r: &Overestimate| (r.columns >> usize::from(r.blocked)) as f64;
        let mean: Vec<(f64, f64)> = of_shape
            .iter()
            .map(|r| (width(r), r.mean))
            .filter(|&(_, v)| v > 0.0)
            .collect();
        let p99: Vec<(f64, f64)> = of_shape
            .iter()
            .map(|r| (width(r), r.p99 as f64))
            .filter(|&(_, v)| v > 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(mean.clone(), color.stroke_width(2)))?
            .label(format!("mean, {name}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(mean.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        chart
            .draw_series(DashedLineSeries::new(
                p99.clone(),
                8,
                5,
                color.stroke_width(2),
            ))?
            .label(format!("99th percentile, {name}"))
            .legend(move |(x, y)| {
                DashedPathElement::new([(x, y), (x + 20, y)], 6, 4, color.stroke_width(2))
            });
        chart.draw_series(
            p99.iter()
                .map(|&p| TriangleMarker::new(p, 5, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

// ---- ns per operation ----

/// One panel of `ns_per_op.svg`: bars for each structure in each category.
pub struct Panel {
    pub title: String,
    /// (workload, label): a separator is drawn where the workload changes.
    pub categories: Vec<(String, String)>,
    /// (bench id, label); the id picks the colour.
    pub structures: Vec<(String, String)>,
    /// By (category, structure) index.
    pub median_ns: HashMap<(usize, usize), f64>,
}

/// One colour per library, a lighter shade for a variant (the small sketch, the borrowed
/// guard).
fn color_of(structure: &str) -> RGBColor {
    let light = structure.contains("3x1024") || structure.contains("borrowed");
    let (dark, pale) = if structure.starts_with("floor") {
        (RGBColor(99, 99, 99), RGBColor(189, 189, 189))
    } else if structure.starts_with("floodgate") {
        (BLUE_DARK, RGBColor(130, 190, 230))
    } else if structure.starts_with("pingora") {
        (ORANGE, RGBColor(253, 190, 133))
    } else if structure.starts_with("dashmap") {
        (RGBColor(44, 160, 44), RGBColor(161, 217, 155))
    } else if structure.starts_with("mutex") {
        (RGBColor(214, 39, 40), RGBColor(252, 146, 114))
    } else if structure.starts_with("governor") {
        (RGBColor(117, 107, 177), RGBColor(188, 189, 220))
    } else {
        (RGBColor(140, 86, 75), RGBColor(196, 156, 148))
    };
    if light {
        pale
    } else {
        dark
    }
}

/// The 1-2-5 steps from the largest at or below `low` to the smallest at or above `high`.
fn one_two_five(low: f64, high: f64) -> Vec<f64> {
    let mut steps = Vec::new();
    let mut decade = 10f64.powf(low.log10().floor());
    while steps.last().copied().unwrap_or(0.0) < high {
        steps.extend([1.0, 2.0, 5.0].map(|step| step * decade));
        decade *= 10.0;
    }
    let first = steps.iter().rposition(|&t| t <= low).unwrap_or(0);
    let last = steps
        .iter()
        .position(|&t| t >= high)
        .unwrap_or(steps.len() - 1);
    steps[first..=last].to_vec()
}

const PANEL_HEIGHT: u32 = 380;
const WIDTH: u32 = 1400;
const LEGEND_WIDTH: u32 = 250;
/// x units per category in the ns/op panels.
const UNIT: i32 = 1000;

pub fn draw_ns_per_op(parts: &[Panel], path: &Path) -> Result<()> {
    let height = PANEL_HEIGHT * parts.len() as u32 + 60;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Median ns per operation (log scale; lower is better; 2 threads: per operation of \
         the aggregate throughput)",
        ("sans-serif", 22),
    )?;
    let panels = root.split_evenly((parts.len(), 1));
    for (part, panel) in parts.iter().zip(&panels) {
        let (plot, legend) = panel.split_horizontally(WIDTH - LEGEND_WIDTH);
        let values = part.median_ns.values().copied();
        let (low, high) = values.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        // The y axis from a 1-2-5 step below the fastest to one above the slowest, a label
        // at every 1-2-5 step between (plotters' own log ticks leave narrow ranges bare).
        let ticks = one_two_five(low / 1.2, high * 1.2);
        let (low, high) = (ticks[0], ticks[ticks.len() - 1]);
        let categories = part.categories.len();
        // Integer x coordinates, UNIT per category (plotters' f64 axes take no custom key
        // points with a custom formatter); a tick and a label at each category's centre.
        let centers: Vec<i32> = (0..categories as i32)
            .map(|c| c * UNIT + UNIT / 2)
            .collect();
        let names: Vec<String> = part.categories.iter().map(|(_, l)| l.clone()).collect();
        let mut chart = ChartBuilder::on(&plot)
            .caption(&part.title, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (0..categories as i32 * UNIT).with_key_points(centers),
                (low..high).log_scale().with_key_points(ticks),
            )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE.mix(0.0))
            .y_desc("ns/op")
            .x_label_formatter(&|x| {
                names
                    .get((x / UNIT).max(0) as usize)
                    .cloned()
                    .unwrap_or_default()
            })
            .y_label_formatter(&|y| format!("{y}"))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 15))
            .draw()?;

        let slot = UNIT * 84 / 100 / part.structures.len() as i32;
        // Each bar's value above it, where the bars are wide enough for the text.
        let bar_pixels = (plot.dim_in_pixel().0 as i32 - 100) * slot / (categories as i32 * UNIT);
        let value_labels = bar_pixels >= 34;
        for (s, (structure, _)) in part.structures.iter().enumerate() {
            let color = color_of(structure);
            if value_labels {
                let labels = (0..categories).filter_map(|c| {
                    let value = *part.median_ns.get(&(c, s))?;
                    let x = c as i32 * UNIT + UNIT * 8 / 100 + s as i32 * slot + slot * 9 / 20;
                    Some(Text::new(
                        crate::ns(value),
                        (x, value),
                        ("sans-serif", 13)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    ))
                });
                chart.draw_series(labels)?;
            }
            let bars = (0..categories).filter_map(|c| {
                let value = *part.median_ns.get(&(c, s))?;
                let x0 = c as i32 * UNIT + UNIT * 8 / 100 + s as i32 * slot;
                Some(Rectangle::new(
                    [(x0, low), (x0 + slot * 9 / 10, value)],
                    color.filled(),
                ))
            });
            chart.draw_series(bars)?;
        }
        // Separators between workloads, where the threads change back to the first count.
        let separators =
            (1..categories).filter(|&c| part.categories[c].0 != part.categories[c - 1].0);
        chart.draw_series(separators.map(|c| {
            PathElement::new(
                [(c as i32 * UNIT, low), (c as i32 * UNIT, high)],
                BLACK.mix(0.3).stroke_width(1),
            )
        }))?;

        let legend = legend.margin(45, 10, 5, 5);
        for (s, (structure, label)) in part.structures.iter().enumerate() {
            let y = 24 * s as i32;
            legend.draw(&Rectangle::new(
                [(0, y), (16, y + 16)],
                color_of(structure).filled(),
            ))?;
            legend.draw(&Text::new(
                label.as_str(),
                (24, y + 1),
                ("sans-serif", 16).into_font(),
            ))?;
        }
    }
    root.present()?;
    Ok(())
}
