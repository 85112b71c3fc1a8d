//! gRPC handlers. Each translates a request, calls into the daemon and maps
//! errors to statuses; no behaviour lives here.

pub mod breakpoint;
pub mod daemon;
pub mod event;
pub mod history;
pub mod inspector;
pub mod probe;
pub mod session;
pub mod subscription;

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

/// The deadline of a write made for `request`: its `grpc-timeout`, the
/// time its caller waits (tonic drops the handler when it passes), or the
/// store's default bound when it sent none.
pub fn write_within<T>(request: &Request<T>) -> stepd_store::Within {
    stepd_store::Within::of(grpc_timeout(request.metadata()))
}

/// A `grpc-timeout` header's time: at most 8 digits and a unit (gRPC over
/// HTTP/2); `None` when it is absent or malformed, as tonic takes it.
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    use std::time::Duration;
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::metadata::MetadataMap;

    use super::grpc_timeout;

    fn timeout(value: &str) -> Option<Duration> {
        let mut metadata = MetadataMap::new();
        metadata.insert("grpc-timeout", value.parse().unwrap());
        grpc_timeout(&metadata)
    }

    #[test]
    fn grpc_timeouts_are_read_in_every_unit_and_malformed_ones_ignored() {
        assert_eq!(timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("250000u"), Some(Duration::from_millis(250)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "S", "123456789S", "+5S", "5s", "5", "-1S"] {
            assert_eq!(timeout(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&MetadataMap::new()), None);
    }
}
