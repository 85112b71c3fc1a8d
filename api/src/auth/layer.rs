//! The one tower layer that bounds every request's headers, authenticates
//! and authorizes it by its method path, puts the [`Identity`] in the
//! request's extensions, holds a call made with a tokens-file token to that
//! token's validity ([`super::lease`]), and writes the audit line of each
//! mutating call once it is answered.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};
use stepd_rpc::status::IntoStatus as _;
use stepd_rpc::status::tonic_code;

use tonic::{
    Code, Status,
    body::Body,
    codegen::http::{Request, Response},
};

use stepd_core::error::clip;

use super::{
    Auth, Identity,
    audit::{Note, Pending},
    lease::{Lease, Leased, Side},
    roles::{self, Need},
};

/// Adds [`AuthService`] in front of the routes.
#[derive(Clone)]
pub struct AuthLayer(pub Arc<Auth>);

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: self.0.clone(),
        }
    }
}

/// See [`AuthLayer`].
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Arc<Auth>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> tower::Service<Request<Body>> for AuthService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let need = roles::need(path);
        let audited = need.audited();
        let method = || path.strip_prefix('/').unwrap_or(path).to_owned();
        let client = || {
            request
                .headers()
                .get("x-stepd-client")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        // Before anything reads them: HTTP/2 decodes headers far larger than
        // this (see server.rs) so that they are refused here, on their own
        // stream, and the connection's other streams go on.
        if let Err(err) = crate::http_limits::headers(path, request.headers()) {
            if audited {
                // Quoted bounded: these are the headers found too large.
                let (method, client) = (clip(&method()), clip(&client()));
                super::audit::write(None, &method, "", &client, tonic_code(err.code()));
            }
            return refuse(err.into_status());
        }
        if need == Need::Open {
            return Box::pin(self.inner.call(request));
        }
        let (who, file_token) = match self
            .auth
            .authenticate(request.headers(), request.extensions())
            .and_then(|caller| {
                let who = super::acting(caller.identity.clone(), request.headers())?;
                Ok((who, caller.file_token.map(|t| (t, caller.identity))))
            }) {
            Ok(who) => who,
            Err(err) => {
                if audited {
                    super::audit::write(None, &method(), "", &client(), tonic_code(err.code()));
                }
                return refuse(err.into_status());
            }
        };
        if !who.role.may(need) {
            if audited {
                super::audit::write(Some(&who), &method(), "", &client(), Code::PermissionDenied);
            }
            let err = roles::denied(&who, need, &method());
            return refuse(err.into_status());
        }
        let pending = audited.then(|| Pending {
            who: Some(who.clone()),
            method: method(),
            note: Note::default(),
            client: client(),
        });
        let extensions = request.extensions_mut();
        // Handlers and the connection registry read the peer's addresses as
        // tonic gives them for plain TCP.
        if let Some(info) =
            crate::peer::TcpPeer::of_request(extensions).map(|peer| peer.info.clone())
        {
            extensions.insert(info);
        }
        extensions.insert::<Arc<Identity>>(who);
        if let Some(pending) = &pending {
            extensions.insert(pending.note.clone());
        }
        let lease = file_token.map(|(token, caller)| Lease::new(self.auth.clone(), token, caller));
        if let Some(lease) = &lease {
            request = request.map(|body| Leased::wrap(body, lease.clone(), Side::Request));
        }
        if lease.is_none() && pending.is_none() {
            return Box::pin(self.inner.call(request));
        }
        let call = self.inner.call(request);
        Box::pin(async move {
            let mut response = call.await?;
            if let Some(lease) = lease {
                response = response.map(|body| Leased::wrap(body, lease, Side::Response));
            }
            Ok(match pending {
                // Outside the lease's body, so the line has the code the
                // lease ended the call with.
                Some(pending) => audited_response(response, pending),
                None => response,
            })
        })
    }
}

fn refuse<E: Send + 'static>(status: Status) -> BoxFuture<Response<Body>, E> {
    Box::pin(std::future::ready(Ok(status.into_http())))
}

/// The code in a response's headers (a trailers-only error) or, for one
/// with a body, the one in its trailers: the audit line is written when the
/// code is known, or when the response is dropped unfinished (CANCELLED).
fn audited_response(response: Response<Body>, pending: Pending) -> Response<Body> {
    if let Some(code) = grpc_code(response.headers()) {
        pending.finish(code);
        return response;
    }
    response.map(|body| {
        Body::new(AuditBody {
            inner: body,
            pending: Some(pending),
        })
    })
}

fn grpc_code(headers: &tonic::codegen::http::HeaderMap) -> Option<Code> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32)
}

struct AuditBody {
    inner: Body,
    pending: Option<Pending>,
}

impl http_body::Body for AuditBody {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_code)
                    && let Some(pending) = self.pending.take()
                {
                    pending.finish(code);
                }
            }
            Poll::Ready(Some(Err(status))) => {
                if let Some(pending) = self.pending.take() {
                    pending.finish(status.code());
                }
            }
            Poll::Ready(None) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for AuditBody {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            pending.finish(Code::Cancelled);
        }
    }
}
