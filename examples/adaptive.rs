//! In-flight limits learnt from latency, on a family of origins: `cargo run --release --example
//! adaptive`.
//!
//! Each member of the family (`floodgate_example_support::capacity_sim`, whose docs give the
//! ranges) is a set of origins of one shape drawn from a seed: 1–200 servers, a service time of
//! 1 ms–1 s with its own noise, Poisson or bursty arrivals, and a fault (slower 2–20×, servers
//! lost, or a hang behind a timeout), for one origin or for a tenth of 400 at once. Each runs
//! in simulated time behind floodgate's learnt limit, a static limit at the same ceiling, and
//! per-origin Vegas and Gradient2 (Netflix concurrency-limits' algorithms, written from their
//! docs), and the table says what the faulty origins got while faulty and after.
//!
//! `--seeds A..B` picks the members (default `101..125`, seeds the constants were not tuned on;
//! they were chosen on `1..25`; seed 0 is the single model the law was first tuned on).
//! `--hash-seed N` fixes the limiter's hash keys (they are random for each build otherwise):
//! which keys share the sketch's counters, and so the members of 400 origins, follow them.
//! `--json FILE` also writes the first member's first faulty origin (its limit, in flight and
//! latency every 100 ms) under each policy, for `tools/compare_report --adaptive FILE`, which
//! draws docs/adaptive.svg.

use std::fmt::Write as _;
use std::ops::Range;

use floodgate::AdaptiveInflight;
use floodgate_example_support::capacity_sim::{
    best_in_hindsight, run, run_with, Fault, Member, Policy, Report,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut seeds: Range<u64> = 101..125;
    let mut json_path = None;
    let mut hash_seed: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json_path = Some(args.next().ok_or("--json FILE")?),
            "--hash-seed" => hash_seed = Some(args.next().ok_or("--hash-seed N")?.parse()?),
            "--seeds" => {
                let range = args.next().ok_or("--seeds A..B")?;
                let (a, b) = range.split_once("..").ok_or("--seeds A..B")?;
                seeds = a.parse()?..b.parse()?;
            }
            _ => return Err("usage: adaptive [--seeds A..B] [--json FILE] [--hash-seed N]".into()),
        }
    }
    let policies = [
        Policy::Adaptive(AdaptiveInflight::new()),
        Policy::Static,
        Policy::Vegas,
        Policy::Gradient2,
    ];
    println!(
        "Each member's faulty origins while faulty (from 2 s in, or three rounds' completions), \
         and after. goodput: served ÷ capacity; p99: 99th percentile latency ÷ the service \
         time's own; healthy: refusals of healthy origins; after: refusals from 2 s after the \
         recovery on; ok: all goals met (for a hang, in flight held to a tenth of the ceiling \
         instead of goodput and p99).\n"
    );
    print!("| seed | member |");
    for policy in &policies {
        print!(" {} goodput / p99 / healthy / after |", policy.name());
    }
    println!(" best limit in hindsight |");
    print!("|---:|---|");
    for _ in &policies {
        print!("---|");
    }
    println!("---|");
    let mut met = vec![0; policies.len() + 1];
    let mut json = String::new();
    for seed in seeds.clone() {
        // Seed 0 is the model the law was first tuned on.
        let member = if seed == 0 {
            Member::tuned()
        } else {
            Member::draw(seed)
        };
        print!("| {seed} | {} |", member.describe());
        for (i, policy) in policies.iter().enumerate() {
            let r = match hash_seed {
                Some(seed) => run_with(&member, *policy, |b| b.hash_seed(seed)),
                None => run(&member, *policy),
            };
            let ok = r.meets_goals(&member);
            met[i] += usize::from(ok);
            print!(" {} |", cell(&member, &r, ok));
            if seed == seeds.start {
                if i == 0 {
                    write!(
                        json,
                        "{{\"member\":\"seed {seed}: {}\",\"from\":{:.1},\"to\":{:.1},\"ceiling\":{},\"runs\":[",
                        member.describe(),
                        (member.fault_from.as_secs_f64() - 2.0).max(0.0),
                        (member.fault_until.as_secs_f64() + 5.0).min(member.duration.as_secs_f64()),
                        member.ceiling
                    )?;
                }
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
                    "{comma}{{\"policy\":\"{}\",\"samples\":[{}]}}",
                    policy.name(),
                    samples.join(",")
                )?;
            }
        }
        // What any in-flight limit can reach: the best one, held exactly while the fault
        // lasts.
        let (limit, r) = best_in_hindsight(&member);
        let ok = r.meets_goals(&member);
        met[policies.len()] += usize::from(ok);
        println!(" {limit}: {} |", cell(&member, &r, ok));
        if std::env::var("FAMILY_TRACE").is_ok_and(|t| t == seed.to_string()) {
            for policy in &policies {
                let r = run(&member, *policy);
                println!("{}:", policy.name());
                for s in r.samples.iter().step_by(5) {
                    println!(
                        "  {:6.1} s  faulty limit {:4} in flight {:4} latency {:8.1} ms | healthy limit {:4} in flight {:4}",
                        s.at, s.limit, s.inflight, s.latency_ms, s.healthy_limit, s.healthy_inflight
                    );
                }
            }
        }
    }
    json.push_str("]}");
    print!(
        "\nmembers meeting every goal, of {}:",
        seeds.end - seeds.start
    );
    for (name, met) in policies
        .iter()
        .map(Policy::name)
        .chain(["best limit in hindsight"])
        .zip(met)
    {
        print!(" {name} {met};");
    }
    println!();
    if let Some(path) = json_path {
        std::fs::write(&path, json)?;
        println!("\nwrote {path}");
    }
    Ok(())
}

/// A run's cell: goodput / p99 ÷ the service time's own (for a hang: in flight ÷ the ceiling)
/// / healthy refusals / refusals from 2 s after the recovery, and `ok` where it meets every
/// goal.
fn cell(member: &Member, r: &Report, ok: bool) -> String {
    let held = if matches!(member.fault, Fault::Hang { .. }) {
        format!("in flight {:.2} of ceiling", r.inflight_share)
    } else {
        format!("{:.2} / {:.2}", r.goodput, r.p99_of_service)
    };
    format!(
        "{held} / {} / {}{}",
        r.refused_healthy,
        r.refused_after_recovery,
        if ok { " ok" } else { "" }
    )
}
