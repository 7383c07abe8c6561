//! Learnt in-flight limits on the family of origin models of `tests/adaptive.rs` (group
//! `adaptive_sim`): one run of a member of `floodgate_example_support::capacity_sim` a
//! criterion iteration, under a limit learnt below the member's ceiling (`learnt`) and under
//! the ceiling alone (`static`), side by side. Two members: the model the law was first tuned
//! on, shortened (21 origins of 10 servers of 10 ms, one 10× slower from 2 s to 6 s of an 8 s
//! run), and member 119 of the family (400 origins of 3 servers of 338 ms, 40 of them 8.3×
//! slower at once), in simulated time on a `ManualClock` (the clock's work, run inside
//! `advance`, is timed too). Throughput counts the simulated requests, so criterion's
//! "elements per second" is the requests a second one core decides, serves (the model's FIFO
//! servers) and completes; the `learnt` / `static` ratio is what learning costs, the learning
//! keys' timed admissions and completions under the exact stage's lock included.
//!
//! `cargo bench --bench adaptive`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floodgate::AdaptiveInflight;
use floodgate_example_support::capacity_sim::{run, Member, Policy};

fn adaptive_sim(c: &mut Criterion) {
    let tuned = Member {
        fault_from: Duration::from_secs(2),
        fault_until: Duration::from_secs(6),
        duration: Duration::from_secs(8),
        ..Member::tuned()
    };
    let many = Member {
        duration: Duration::from_secs(12),
        fault_until: Duration::from_secs(10),
        ..Member::draw(119)
    };
    for (name, member) in [("tuned", tuned), ("many_origins", many)] {
        let capacity = member.servers as f64 / member.service.as_secs_f64();
        let requests =
            capacity * member.load * member.origins as f64 * member.duration.as_secs_f64();
        let mut group = c.benchmark_group(format!("adaptive_sim/{name}"));
        group.throughput(Throughput::Elements(requests as u64));
        group.sample_size(10);
        let policies = [
            ("learnt", Policy::Adaptive(AdaptiveInflight::new())),
            ("static", Policy::Static),
        ];
        for (name, policy) in policies {
            group.bench_function(name, |b| b.iter(|| run(&member, policy)));
        }
        group.finish();
    }
}

criterion_group!(benches, adaptive_sim);
criterion_main!(benches);
