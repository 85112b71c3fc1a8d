//! `grpc.health.v1.Health` that lets go of its watchers when the drain
//! starts: each open `Watch` is told NOT_SERVING and then ends, so a load
//! balancer's long-lived watch does not hold the graceful shutdown open until
//! the drain deadline.

use std::{
    future::Future as _,
    pin::Pin,
    task::{Context, Poll},
};

use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tonic_health::{
    pb::{
        HealthCheckRequest, HealthCheckResponse,
        health_check_response::ServingStatus as Wire,
        health_server::{Health, HealthServer},
    },
    server::{HealthReporter, HealthService},
};

/// The reporter the daemon sets statuses through, and the service that
/// serves them, whose `Watch` streams end once `drain` is cancelled.
pub fn reporter(drain: CancellationToken) -> (HealthReporter, HealthServer<DrainingHealth>) {
    let reporter = HealthReporter::new();
    let inner = HealthService::from_health_reporter(reporter.clone());
    (reporter, HealthServer::new(DrainingHealth { inner, drain }))
}

/// The stock health service, with `Watch` bounded by the drain.
#[derive(Debug)]
pub struct DrainingHealth {
    inner: HealthService,
    drain: CancellationToken,
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for DrainingHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.inner.check(request).await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let statuses = self.inner.watch(request).await?.into_inner();
        Ok(Response::new(until_drain(statuses, self.drain.clone())))
    }
}

/// `statuses` until the drain starts, then NOT_SERVING (unless that was
/// the last status sent) and the end of the stream.
fn until_drain(
    statuses: impl Stream<Item = Result<HealthCheckResponse, Status>> + Send + 'static,
    drain: CancellationToken,
) -> WatchStream {
    Box::pin(UntilDrain {
        statuses: Box::pin(statuses),
        drain: Box::pin(drain.cancelled_owned()),
        last: None,
        ended: false,
    })
}

struct UntilDrain {
    statuses: WatchStream,
    drain: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// The status last sent, so NOT_SERVING is not sent twice.
    last: Option<i32>,
    ended: bool,
}

impl Stream for UntilDrain {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // The drain first, so a watcher that was just told SERVING is not
        // kept past it by a busy stream.
        if self.drain.as_mut().poll(cx).is_ready() {
            self.ended = true;
            let not_serving = Wire::NotServing as i32;
            return Poll::Ready((self.last != Some(not_serving)).then_some(Ok(
                HealthCheckResponse {
                    status: not_serving,
                },
            )));
        }
        let item = std::task::ready!(self.statuses.as_mut().poll_next(cx));
        match &item {
            Some(Ok(response)) => self.last = Some(response.status),
            Some(Err(_)) | None => self.ended = true,
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt as _;

    fn response(status: Wire) -> Result<HealthCheckResponse, Status> {
        Ok(HealthCheckResponse {
            status: status as i32,
        })
    }

    async fn collect(stream: WatchStream) -> Vec<i32> {
        stream.map(|item| item.unwrap().status).collect().await
    }

    #[tokio::test]
    async fn a_watch_after_the_drain_gets_not_serving_and_ends() {
        let drain = CancellationToken::new();
        drain.cancel();
        let pending = tokio_stream::pending::<Result<HealthCheckResponse, Status>>();
        assert_eq!(
            collect(until_drain(pending, drain)).await,
            vec![Wire::NotServing as i32]
        );
    }

    #[tokio::test]
    async fn an_open_watch_ends_when_the_drain_starts() {
        let drain = CancellationToken::new();
        let statuses = tokio_stream::iter([response(Wire::Serving)])
            .chain(tokio_stream::pending::<Result<HealthCheckResponse, Status>>());
        let mut stream = until_drain(statuses, drain.clone());
        assert_eq!(
            stream.next().await.unwrap().unwrap().status,
            Wire::Serving as i32
        );
        drain.cancel();
        assert_eq!(collect(stream).await, vec![Wire::NotServing as i32]);
    }

    #[tokio::test]
    async fn not_serving_is_not_repeated() {
        let drain = CancellationToken::new();
        let statuses = tokio_stream::iter([response(Wire::Serving), response(Wire::NotServing)])
            .chain(tokio_stream::pending::<Result<HealthCheckResponse, Status>>());
        let mut stream = until_drain(statuses, drain.clone());
        stream.next().await;
        stream.next().await;
        drain.cancel();
        assert!(collect(stream).await.is_empty());
    }
}
