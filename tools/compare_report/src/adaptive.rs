//! `adaptive.svg`: the first faulty origin of one member of the family of origin models
//! (`cargo run --release --example adaptive -- --seeds N..N+1 --json FILE`) over time, under
//! each policy the example runs (floodgate's learnt limit, the static ceiling, Vegas,
//! Gradient2): above, the limit it was judged by and its requests in flight; below, the mean
//! latency of its requests that completed in each 100 ms, on a log scale.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

use crate::plots::{BLUE_DARK, GREEN_DARK, ORANGE, PURPLE};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// One policy's samples: seconds, limit, in flight, latency in ms.
struct Run {
    policy: String,
    samples: Vec<[f64; 4]>,
}

/// The member the example ran: its description, the span to draw (seconds), its ceiling.
struct Member {
    title: String,
    from: f64,
    to: f64,
    ceiling: f64,
}

fn read(path: &Path) -> Result<(Member, Vec<Run>)> {
    let text = std::fs::read_to_string(path)?;
    let value: Value = serde_json::from_str(&text)?;
    let number = |key: &str| value[key].as_f64().ok_or(format!("no number \"{key}\""));
    let member = Member {
        title: value["member"].as_str().ok_or("no member")?.to_owned(),
        from: number("from")?,
        to: number("to")?,
        ceiling: number("ceiling")?,
    };
    let runs = value["runs"]
        .as_array()
        .ok_or("expected an array of runs")?;
    let runs = runs
        .iter()
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
        .collect::<Result<Vec<_>>>()?;
    Ok((member, runs))
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
    let (member, runs) = read(json)?;
    let (from, to) = (member.from, member.to);
    let root = SVGBackend::new(svg, (1000, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&member.title, ("sans-serif", 18))?;
    let (upper, lower) = root.split_vertically(380);
    let colors = [BLUE_DARK, ORANGE, PURPLE, GREEN_DARK];
    if runs.len() > colors.len() {
        return Err(format!("{} runs, colours for {}", runs.len(), colors.len()).into());
    }
    let latencies = runs
        .iter()
        .flat_map(|r| r.samples.iter())
        .filter(|s| (from..=to).contains(&s[0]) && s[3] > 0.0)
        .map(|s| s[3]);
    let (low, high) = latencies.fold((f64::INFINITY, 0.0f64), |(l, h), x| (l.min(x), h.max(x)));
    let (low, high) = if low <= high {
        (low / 2.0, high * 2.0)
    } else {
        (1.0, 10.0)
    };

    let mut chart = ChartBuilder::on(&upper)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(from..to, 0.0..member.ceiling * 1.1)?;
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
        .build_cartesian_2d(from..to, (low..high).log_scale())?;
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
