//! One try of a request: what the retry loop and the mirror call.
//!
//! Every tower `Service` is one (readiness, then `call`). The pipeline's upstream sender implements it
//! directly with an `async fn`, so a try is awaited in place: as a tower service its future had to be named,
//! so it was boxed — one allocation of 2.8 KB and a copy of it on every request (callgrind; docs/benchmarks-history.md,
//! gateway, *the request handed over before its future is made*).

use std::future::Future;

use tower::{Service, ServiceExt};

/// Sends one try of a request.
pub trait SendTry<Req> {
    /// What a try answers.
    type Response;
    /// Why a try failed.
    type Error;

    /// Sends `req` once.
    fn send_try(&mut self, req: Req) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send;
}

impl<S, Req> SendTry<Req> for S
where
    S: Service<Req> + Send,
    S::Future: Send,
    Req: Send,
{
    type Response = S::Response;
    type Error = S::Error;

    async fn send_try(&mut self, req: Req) -> Result<S::Response, S::Error> {
        self.ready().await?;
        self.call(req).await
    }
}
