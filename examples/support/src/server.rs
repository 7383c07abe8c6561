//! The server: the limiter's settings, the runtime, and the loop that serves each connection.
//! The demo (examples/demo.rs) and the soak server (tools/soak) build their limiters from
//! these settings, so that both measure the same server.

use std::convert::Infallible;

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
