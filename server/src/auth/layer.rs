//! The one tower layer that authenticates and authorizes every request by
//! its method path, puts the [`Identity`] in the request's extensions, and
//! writes the audit line of each mutating call once it is answered.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tonic::{
    Code, Status,
    body::Body,
    codegen::http::{Request, Response},
};

use super::{
    Auth, Identity,
    audit::{Note, Pending},
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

impl<S, B> tower::Service<Request<B>> for AuthService<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let path = request.uri().path();
        let need = roles::need(path);
        if need == Need::Open {
            return Box::pin(self.inner.call(request));
        }
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
        let who = match self
            .auth
            .authenticate(request.headers(), request.extensions())
            .and_then(|who| super::acting(who, request.headers()))
        {
            Ok(who) => who,
            Err(err) => {
                if audited {
                    super::audit::write(None, &method(), "", &client(), Code::Unauthenticated);
                }
                return refuse(err.into());
            }
        };
        if !who.role.may(need) {
            if audited {
                super::audit::write(Some(&who), &method(), "", &client(), Code::PermissionDenied);
            }
            let err = roles::denied(&who, need, &method());
            return refuse(err.into());
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
            super::peer::TcpPeer::of_request(extensions).map(|peer| peer.info.clone())
        {
            extensions.insert(info);
        }
        extensions.insert::<Arc<Identity>>(who);
        let Some(pending) = pending else {
            return Box::pin(self.inner.call(request));
        };
        extensions.insert(pending.note.clone());
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            Ok(audited_response(response, pending))
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
