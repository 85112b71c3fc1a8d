//! gRPC handlers. Each translates a request, calls into the daemon and maps
//! errors to statuses; no behaviour lives here.

pub mod breakpoint;
pub mod daemon;
pub mod event;
pub mod history;
pub mod inspector;
pub mod probe;
pub mod session;

use tonic::Request;

/// Who is calling, for `pause_resolved.by`: the `x-stepd-client` header, else
/// the peer address.
pub fn client_name<T>(request: &Request<T>) -> String {
    request
        .metadata()
        .get("x-stepd-client")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.remote_addr().map(|a| a.to_string()))
        .unwrap_or_else(|| "local".to_owned())
}
