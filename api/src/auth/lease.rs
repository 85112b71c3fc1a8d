//! A tokens-file token's hold on the calls it authenticated: a call lasts
//! only as long as its token stays valid. The layer wraps both bodies of
//! such a call; each checks the token every [`CHECK`] against the tokens
//! file as last read (re-read every [`super::tokens::REFRESH`]), so one
//! mechanism ends every stream — `Subscribe`, a probe's `Connect`,
//! `PrintValue`, any other — within two seconds of the token's line being
//! removed or changed, or of its expiry.
//!
//! Once the token is no longer valid the response ends with its status
//! (UNAUTHENTICATED, or TOKEN_EXPIRED) in the trailers, and the request
//! stream fails with it, so a handler reading it stops as on a disconnect
//! (a probe's session ends; its holds come back when it reconnects).

use std::{
    pin::Pin,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
    time::Duration,
};

use http_body::Frame;
use tonic::{Status, body::Body};

use super::{Auth, Identity, tokens::Hash};
use stepd_core::error::ApiError;

/// How often an open call checks its token.
pub const CHECK: Duration = Duration::from_secs(1);

/// The token a call was authenticated with, and the verdict once it failed.
pub struct Lease {
    auth: Arc<Auth>,
    token: Hash,
    identity: Arc<Identity>,
    /// Why the call ends; set once, by whichever body finds it first.
    ended: OnceLock<ApiError>,
}

impl Lease {
    /// A lease on `token`, which authenticated the call as `identity`.
    pub fn new(auth: Arc<Auth>, token: Hash, identity: Arc<Identity>) -> Arc<Self> {
        Arc::new(Self {
            auth,
            token,
            identity,
            ended: OnceLock::new(),
        })
    }

    /// Why the call must end, if it must. A lease that failed stays failed:
    /// a token put back does not revive a call already refused.
    fn check(&self) -> Option<&ApiError> {
        if self.ended.get().is_none()
            && let Err(err) = self.auth.still_valid(&self.token, &self.identity)
        {
            let _ = self.ended.set(err);
        }
        self.ended.get()
    }
}

/// Which body of the call a [`Leased`] wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What the client sends: fails with the status.
    Request,
    /// What the daemon answers: ends with the status in its trailers.
    Response,
}

/// A body of a call held by a [`Lease`].
pub struct Leased {
    inner: Body,
    lease: Arc<Lease>,
    side: Side,
    tick: tokio::time::Interval,
    done: bool,
}

impl Leased {
    /// Wraps `inner`, one side of a call held by `lease`.
    pub fn wrap(inner: Body, lease: Arc<Lease>, side: Side) -> Body {
        let mut tick = tokio::time::interval(CHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Body::new(Self {
            inner,
            lease,
            side,
            tick,
            done: false,
        })
    }

    /// The verdict, checking when the tick is due (and registering for the
    /// next one) or taking the other side's.
    fn verdict(&mut self, cx: &mut Context<'_>) -> Option<Status> {
        while self.tick.poll_tick(cx).is_ready() {
            self.lease.check();
        }
        self.lease
            .ended
            .get()
            .cloned()
            .map(stepd_rpc::status::status)
    }

    /// Ends this side with `status`, letting the handler's side go now.
    fn end(&mut self, status: Status) -> Poll<Option<Result<Frame<bytes::Bytes>, Status>>> {
        self.done = true;
        self.inner = Body::empty();
        match self.side {
            Side::Request => Poll::Ready(Some(Err(status))),
            Side::Response => {
                let mut trailers = tonic::codegen::http::HeaderMap::new();
                match status.add_header(&mut trailers) {
                    Ok(()) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                    Err(status) => Poll::Ready(Some(Err(status))),
                }
            }
        }
    }
}

impl http_body::Body for Leased {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(status) = self.verdict(cx) {
            return self.end(status);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // The handler may end its answer because the request side failed
        // first (a probe's session ends, then its stream): the answer then
        // ends with the lease's status, never OK.
        let ending = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => frame.is_trailers(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => false,
        };
        if ending
            && self.side == Side::Response
            && let Some(err) = self.lease.check()
        {
            let status = stepd_rpc::status::status(err.clone());
            return self.end(status);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
