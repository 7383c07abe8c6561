//! `adaptive.svg`: the slow origin of `cargo run --release --example adaptive -- --json FILE`
//! over time, under a learnt in-flight limit and under two static ones: above, the limit it was
//! judged by and its requests in flight; below, the mean latency of its requests that completed
//! in each 100 ms, on a log scale.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

use crate::plots::{BLUE_DARK, ORANGE, PURPLE};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// One policy's samples: seconds, limit, in flight, latency in ms.
struct Run {
    policy: String,
    samples: Vec<[f64; 4]>,
}

fn read(path: &Path) -> Result<Vec<Run>> {
    let text = std::fs::read_to_string(path)?;
    let value: Value = serde_json::from_str(&text)?;
    let runs = value.as_array().ok_or("expected an array of runs")?;
    runs.iter()
        .map(|run| {
            let policy = run["policy"]
                .as_str()
                .ok_or("a run without a policy")?
                .to_owned();
            let samples = run["samples"]
                .as_array()
                .ok_or("a run without samples")?
                .iter()
                .map(|s| {
                    let n = |i: usize| s[i].as_f64().ok_or("a sample that is not 4 numbers");
                    Ok([n(0)?, n(1)?, n(2)?, n(3)?])
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Run { policy, samples })
        })
        .collect()
}

/// The series' legend, in the upper right corner of `chart`.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

/// Draws `json` (the example's output) to `svg`.
pub fn draw(json: &Path, svg: &Path) -> Result<()> {
    let runs = read(json)?;
    let (from, to) = (8.0, 30.0);
    let root = SVGBackend::new(svg, (1000, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "One origin slows down 10x from 10 s to 25 s (10 servers, 500 requests/s offered)",
        ("sans-serif", 22),
    )?;
    let (upper, lower) = root.split_vertically(380);
    let colors = [BLUE_DARK, ORANGE, PURPLE];

    let mut chart = ChartBuilder::on(&upper)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(from..to, 0.0..110.0)?;
    chart
        .configure_mesh()
        .y_desc("in-flight limit / in flight")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (run, color) in runs.iter().zip(colors) {
        let within = || run.samples.iter().filter(|s| (from..=to).contains(&s[0]));
        chart
            .draw_series(LineSeries::new(
                within().map(|s| (s[0], s[1])),
                color.stroke_width(2),
            ))?
            .label(format!("{}: limit", run.policy))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                within().map(|s| (s[0], s[2])),
                color.mix(0.4),
            ))?
            .label(format!("{}: in flight", run.policy))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.mix(0.4)));
    }
    legend(&mut chart)?;

    let mut chart = ChartBuilder::on(&lower)
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(from..to, (5.0..2000.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("mean latency, ms")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (run, color) in runs.iter().zip(colors) {
        let points = run
            .samples
            .iter()
            .filter(|s| (from..=to).contains(&s[0]) && s[3] > 0.0)
            .map(|s| (s[0], s[3]));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(run.policy.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}
