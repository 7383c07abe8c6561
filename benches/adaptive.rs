//! Learnt in-flight limits on the model of origins of `tests/adaptive.rs` (group
//! `adaptive_sim`): one run of `floodgate_example_support::capacity_sim` a criterion
//! iteration, under a limit learnt below a ceiling of 100 (`learnt`) and under a static 100
//! (`static`), side by side. The scenario is the test's, shortened: 20 healthy origins and one
//! that slows down 10× from 2 s to 6 s of an 8 s run, 500 requests a second each, in
//! simulated time on a `ManualClock` (its clock's work, run inside `advance`, is timed too).
//! Throughput counts the simulated requests, so criterion's "elements per second" is the
//! requests a second one core decides, serves (the model's FIFO servers) and completes; the
//! `learnt` / `static` ratio is what learning costs, the slow origin's timed admissions and
//! completions included.
//!
//! `cargo bench --bench adaptive`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate::AdaptiveInflight;
use floodgate_example_support::capacity_sim::{run, Policy, Scenario};

fn adaptive_sim(c: &mut Criterion) {
    let scenario = Scenario {
        slow_from: Duration::from_secs(2),
        slow_until: Duration::from_secs(6),
        duration: Duration::from_secs(8),
        ..Scenario::default()
    };
    let requests = (scenario.rate * (scenario.healthy + 1) as f64 * 8.0) as u64;
    let mut group = c.benchmark_group("adaptive_sim");
    group.throughput(Throughput::Elements(requests));
    group.sample_size(10);
    let policies = [
        (
            "learnt",
            Policy::Adaptive {
                ceiling: 100,
                config: AdaptiveInflight::new(),
            },
        ),
        ("static", Policy::Static(100)),
    ];
    for (name, policy) in policies {
        group.bench_function(name, |b| b.iter(|| run(&scenario, policy)));
    }
    group.finish();
}

criterion_group!(benches, adaptive_sim);
criterion_main!(benches);
