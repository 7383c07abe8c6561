//! In-flight limits learnt from latency, on a model of origins: `cargo run --release --example
//! adaptive`.
//!
//! 20 healthy origins of 10 servers of 10 ms, each sent 500 requests a second (half what it
//! serves), and one that slows down 10× from 10 s to 25 s of a 35 s run, in simulated time
//! (`floodgate_example_support::capacity_sim`). It runs behind a limiter that learns each hot
//! origin's in-flight limit under a ceiling of 100, then behind static limits of 100 (too high)
//! and 4 (too low), and prints what the slow origin got while it was slow. With `--json FILE`
//! it also writes the slow origin's limit, in flight and latency every 100 ms under each, for
//! `tools/compare_report --adaptive FILE`, which draws docs/adaptive.svg.

use std::fmt::Write as _;

use floodgate::AdaptiveInflight;
use floodgate_example_support::capacity_sim::{run, Policy, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let json_path = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, path] if flag == "--json" => Some(path.clone()),
        _ => return Err("usage: adaptive [--json FILE]".into()),
    };
    let scenario = Scenario::default();
    let policies = [
        (
            "learnt (ceiling 100)",
            Policy::Adaptive {
                ceiling: 100,
                config: AdaptiveInflight::new(),
            },
        ),
        ("static 100", Policy::Static(100)),
        ("static 4", Policy::Static(4)),
    ];
    println!(
        "The slow origin, while slowed (service time 100 ms, 10 servers: 100 requests/s), from 2 s \
         after it slowed down; latencies in service times:\n"
    );
    println!(
        "| limit | served / capacity | p50 | p99 | p99, first 2 s too | refused | refused while healthy (every origin) | refusals end after its recovery |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut json = String::from("[");
    for (i, (name, policy)) in policies.into_iter().enumerate() {
        let r = run(&scenario, policy);
        let healthy = r.refused_healthy + r.refused_healthy_times;
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {healthy} | {:.2} s |",
            r.goodput,
            r.p50,
            r.p99,
            r.p99_whole,
            r.refused_slow,
            r.recovered_after.as_secs_f64()
        );
        let samples: Vec<String> = r
            .samples
            .iter()
            .map(|s| {
                format!(
                    "[{:.1},{},{},{:.2}]",
                    s.at, s.limit, s.inflight, s.latency_ms
                )
            })
            .collect();
        let comma = if i == 0 { "" } else { "," };
        write!(
            json,
            "{comma}{{\"policy\":\"{name}\",\"samples\":[{}]}}",
            samples.join(",")
        )?;
    }
    json.push(']');
    if let Some(path) = json_path {
        std::fs::write(&path, json)?;
        println!("\nwrote {path}");
    }
    Ok(())
}
