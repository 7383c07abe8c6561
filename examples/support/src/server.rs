//! The server: the limiter's settings, the runtime, and the loop that serves each connection.

use std::convert::Infallible;
use std::time::Duration;

use floodgate::Limiter;
use floodgate_test_support::counting_alloc::bytes_held_by;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

pub const MAX_INFLIGHT: u32 = 16;
pub const MAX_RATE: u32 = 1000; // per second
/// The most requests per second the limiter is sized for: this demo's own volume (about
/// 100,000 a second at best, client and server sharing two cores), with room to spare.
pub const PEAK_RATE: u64 = 250_000;
pub const SERVER_THREADS: usize = 2;

/// The limiter, and the heap bytes it holds (read off the counting allocator).
pub fn build_limiter() -> Result<(Limiter<String>, usize), floodgate::ConfigError> {
    // The shared ticker thread starts with the first rate limit; start it before measuring,
    // so the measurement is the limiter's alone.
    drop(
        Limiter::<String>::builder()
            .max_rate(1, Duration::from_secs(1))
            .build()?,
    );
    let (limiter, heap) = bytes_held_by(|| {
        Limiter::<String>::builder()
            .max_inflight(MAX_INFLIGHT)
            .max_rate(MAX_RATE, Duration::from_secs(1))
            .peak_rate(PEAK_RATE)
            .build()
    });
    Ok((limiter?, heap))
}

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_THREADS)
        .enable_all()
        .build()
}

/// The server: accepts on `listener` and serves each connection with a clone of `service`.
pub async fn serve<S, B>(listener: tokio::net::TcpListener, service: S)
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
