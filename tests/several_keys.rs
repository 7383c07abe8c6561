#![cfg(not(floodgate_loom))]
//! Several keys, one decision (`try_acquire_and`): a request is admitted only if every key
//! admits it, a key that refuses leaves the keys after it unasked, and a key is charged only
//! for the requests every key admitted — in flight at once, and in the exact counts that
//! decide its rate near the limit — within the documented bounds: across threads, one request
//! per other thread for the time of the decision; in the rate sketch, which keeps refused
//! requests as offered load, at most the promotion threshold less one unit when the key is
//! promoted.
//!
//! Rate windows run on a `ManualClock`: no test sleeps, none asserts a timing.

use std::cell::Cell;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Reason};

const SECOND: Duration = Duration::from_secs(1);

fn per_second<K: Hash + Eq + Send + Sync + 'static>(limit: u32, clock: &ManualClock) -> Limiter<K> {
    Limiter::builder()
        .max_rate(limit, SECOND)
        .clock(clock)
        .build()
        .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The case: a host charged for requests its clients' limits refused. 10 requests of a
/// client limited to 3 leave the host (limited to 5) room for 2 more.
#[test]
fn a_key_is_charged_only_for_what_every_key_admitted() {
    let clock = ManualClock::new();
    let hosts: Limiter<String> = per_second(5, &clock);
    let clients: Limiter<IpAddr> = per_second(3, &clock);
    let request = |client: &str| {
        let judged = hosts.try_acquire_and("api.example", || clients.try_acquire(&ip(client)));
        judged.map(drop).map_err(|r| r.reason)
    };
    let first: Vec<_> = (0..10).map(|_| request("192.0.2.7")).collect();
    assert_eq!(first.iter().filter(|r| r.is_ok()).count(), 3);
    let second: Vec<_> = (0..3).map(|_| request("198.51.100.1")).collect();
    assert_eq!(
        second,
        [Ok(()), Ok(()), Err(Reason::Rate)],
        "2 of the host's 5 left"
    );
    assert_eq!(hosts.estimate("api.example").rate, Some(5.0));
}

/// A request of the key refused while another's admission of it is being decided further in
/// holds a deadline that counted that admission; when the admission is taken back, the
/// deadline is late, and must go with it, or the key is refused the room the refund left.
#[test]
fn an_admission_taken_back_leaves_its_key_no_deadline() {
    let clock = ManualClock::new();
    let hosts: Limiter<String> = per_second(5, &clock);
    for n in 1..=4 {
        drop(
            hosts
                .try_acquire("api.example")
                .unwrap_or_else(|r| panic!("request {n}: {r}")),
        );
    }
    // The 5th admission fills the host; within its decision another request is refused and
    // holds the host's deadline; the rest refuse the 5th, which is taken back.
    let refused = hosts.try_acquire_and("api.example", || {
        let meanwhile = hosts.try_acquire("api.example").map(drop);
        assert_eq!(
            meanwhile.as_ref().map_err(|r| r.reason),
            Err(Reason::Rate),
            "the 6th"
        );
        meanwhile
    });
    assert_eq!(refused.map(drop).map_err(|r| r.reason), Err(Reason::Rate));
    assert_eq!(hosts.estimate("api.example").rate, Some(4.0), "taken back");
    assert!(
        hosts.try_acquire("api.example").is_ok(),
        "the host refused the room the refund left"
    );
}

/// The admission that takes a key to its limit holds the key's next requests in the over-limit
/// cache; taken back because another key refused, it must take that deadline back too, or the
/// key is refused the room the refund gave it.
#[test]
fn an_admission_that_filled_its_key_taken_back_leaves_it_no_deadline() {
    let clock = ManualClock::new();
    let hosts: Limiter<String> = per_second(5, &clock);
    let clients: Limiter<IpAddr> = per_second(1, &clock);
    let request = |client: &str| {
        let judged = hosts.try_acquire_and("api.example", || clients.try_acquire(&ip(client)));
        judged.map(drop).map_err(|r| r.reason)
    };
    for n in 1..=4 {
        assert_eq!(request(&format!("192.0.2.{n}")), Ok(()), "request {n} of 5");
    }
    drop(clients.try_acquire(&ip("192.0.2.9")).unwrap());
    // The host's 5th admission fills it; the client, at its limit, refuses.
    assert_eq!(request("192.0.2.9"), Err(Reason::Rate));
    assert_eq!(hosts.estimate("api.example").rate, Some(4.0), "taken back");
    assert_eq!(
        request("192.0.2.10"),
        Ok(()),
        "the host refused the room the refund gave back"
    );
}

/// Requests refused further in before the first key's promotion stay in its rate sketch as
/// offered load: once the key is promoted they count against it up to its promotion threshold
/// less one unit (here 4 of the 19 a client's limit refused), and those refused after its
/// promotion not at all.
#[test]
fn requests_refused_further_in_cost_a_key_at_most_its_promotion_threshold_less_one() {
    let clock = ManualClock::new();
    let hosts: Limiter<String> = per_second(10, &clock);
    let clients: Limiter<IpAddr> = per_second(1, &clock);
    let wide: Limiter<IpAddr> = per_second(1_000, &clock);
    let through = |clients: &Limiter<IpAddr>, client: &str| {
        hosts
            .try_acquire_and("api.example", || clients.try_acquire(&ip(client)))
            .is_ok()
    };
    let first = (0..20).filter(|_| through(&clients, "192.0.2.7")).count();
    assert_eq!(first, 1, "the client's limit of 1");
    let second = (0..20).filter(|_| through(&wide, "198.51.100.1")).count();
    assert!(
        (10 - 1 - 4..=10 - 1).contains(&second),
        "{second} admitted: at most 4 units of the 19 refused further in count against the host"
    );
}

/// A request the second key refuses gives the first key's in-flight slot back at once, from
/// either stage.
#[test]
fn a_refused_request_holds_no_slot_of_the_keys_that_admitted_it() {
    let origins: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let customers: Limiter<u64> = Limiter::builder().max_inflight(1).build().unwrap();
    let held = customers.try_acquire(&7).unwrap();
    // Three held of the origin's 4: promoted, so its slot is counted in the exact stage.
    let busy: Vec<_> = (0..3).map(|_| origins.try_acquire("a").unwrap()).collect();
    for origin in ["a", "b"] {
        let refused = origins.try_acquire_and(origin, || customers.try_acquire(&7));
        assert_eq!(refused.unwrap_err().reason, Reason::Inflight);
    }
    assert_eq!(origins.estimate("a").inflight, Some(3));
    assert_eq!(origins.estimate("b").inflight, Some(0));
    drop(held);
    let (origin, customer) = origins
        .try_acquire_owned_and("a", || customers.try_acquire_owned(&7))
        .unwrap();
    assert_eq!(origins.estimate("a").inflight, Some(4));
    drop((origin, customer, busy));
    assert_eq!(origins.estimate("a").inflight, Some(0));
}

/// The first key refuses: the others are not asked, and so not charged.
#[test]
fn the_keys_after_a_refusal_are_not_asked() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let _held = limiter.try_acquire("client").unwrap();
    let asked = Cell::new(false);
    let refused = limiter.try_acquire_and("client", || {
        asked.set(true);
        limiter.try_acquire("origin")
    });
    assert!(refused.is_err());
    assert!(!asked.get());
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// Three keys nest; the last one's refusal gives back what the first two took, its cost too.
#[test]
fn three_keys_nest_and_a_refusal_of_the_last_gives_back_the_costs_of_the_first_two() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = per_second(10, &clock);
    let request = |cost: u32| {
        let keys = limiter.with_cost(cost);
        let judged = keys.try_acquire_and("client", || {
            keys.try_acquire_and("customer", || keys.try_acquire("origin"))
        });
        judged.map(drop).is_ok()
    };
    assert!(request(6), "6 of 10 in each");
    drop(limiter.with_cost(4).try_acquire("origin").unwrap()); // the origin is full
    assert!(!request(3));
    // The client and the customer were promoted at 6 (past half of 10): their exact counts,
    // which the refusal left at 6, decide.
    assert_eq!(limiter.estimate("client").rate, Some(6.0));
    assert_eq!(limiter.estimate("customer").rate, Some(6.0));
    assert!(limiter.with_cost(4).try_acquire("client").is_ok(), "4 left");
}

/// In shadow, the first key's would-be refusal is served (and counted as a refusal); a refusal
/// by the rest leaves it so.
#[test]
fn a_shadow_admission_of_the_first_key_is_answered_by_the_rest() {
    let clock = ManualClock::new();
    let hosts: Limiter<String> = Limiter::builder()
        .max_rate(1, SECOND)
        .shadow(true)
        .clock(&clock)
        .build()
        .unwrap();
    let clients: Limiter<IpAddr> = per_second(2, &clock);
    let client = ip("192.0.2.7");
    let (host, _client) = hosts
        .try_acquire_and("h", || clients.try_acquire(&client))
        .unwrap();
    assert!(host.shadow_rejection().is_none());
    let (host, _client) = hosts
        .try_acquire_and("h", || clients.try_acquire(&client))
        .unwrap();
    let would = host
        .shadow_rejection()
        .expect("2 of the host's 1: served in shadow");
    assert_eq!(would.limit, 1);
    let refused = hosts.try_acquire_and("h", || clients.try_acquire(&client));
    let refused = refused.unwrap_err();
    assert_eq!(
        (refused.reason, refused.limit),
        (Reason::Rate, 2),
        "the client's refusal, 3 of its 2"
    );
}

/// Two threads send requests of 50 clients (2 admitted each) to one host limited to 100:
/// every request the clients admit fits the host, but for what the documented bounds allow.
/// Each other thread's request can weigh on the host twice: while it is decided (it is
/// counted, then refused by its client and taken back), and if it was counted in the host's
/// sketch when the host was promoted (the exact counts start from the sketch, and a request
/// the sketch admitted is not in them to be taken back). The host never admits more than its
/// limit, and is charged for what it admitted. Fifty rounds, each with limiters of its own.
#[test]
fn concurrent_decisions_charge_the_host_only_for_what_the_clients_admitted() {
    for _ in 0..50 {
        one_round_of_concurrent_decisions();
    }
}

fn one_round_of_concurrent_decisions() {
    const THREADS: usize = 2;
    let clock = ManualClock::new();
    let hosts: Limiter<String> = per_second(100, &clock);
    let clients: Limiter<u64> = per_second(2, &clock);
    let admitted = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (hosts, clients, admitted) = (&hosts, &clients, &admitted);
            s.spawn(move || {
                for _ in 0..10 {
                    for client in (t..50).step_by(THREADS) {
                        let judged = hosts.try_acquire_and("host", || clients.try_acquire(&client));
                        if judged.is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= 100,
        "the host admitted {admitted}, over its 100"
    );
    assert!(
        admitted >= 100 - 2 * (THREADS - 1),
        "the clients admitted 100, the host only {admitted}: charged for refused requests"
    );
    let charged = hosts.estimate("host").rate.unwrap();
    assert!(
        charged >= admitted as f64 && charged <= 100.0,
        "charged {charged} for {admitted}"
    );
}
