//! Transport security: TLS and mutual TLS on the TCP listener, the caller's
//! identity from its client certificate (or, when the operator trusts it,
//! from a mesh sidecar's `x-forwarded-client-cert` header), the file mapping
//! certificate identities to roles, and the rule that a listener off
//! loopback needs TLS, tokens or `--insecure`.
//!
//! Everything here that decides (identity, roles, exposure) is a pure
//! function; the auth layer maps a [`PeerIdentity`] to a role with the map
//! [`load_client_roles`] returns. A certificate whose identity has no entry
//! gets no role, so every RPC but health is refused `PERMISSION_DENIED`.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, bail};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig, server::WebPkiClientVerifier};
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

/// The header a mesh sidecar (Envoy, Istio) sets to describe the client
/// certificate it verified.
pub const FORWARDED_CLIENT_CERT: &str = "x-forwarded-client-cert";

/// The role names a `--tls-client-roles` file may give, lowest first
/// (`probe` stands apart: it may only connect probes).
pub const ROLE_NAMES: &[&str] = &["viewer", "controller", "admin", "probe"];

/// The identity in a client certificate (DER): its first URI subject
/// alternative name (a SPIFFE id, say), else its first DNS name, else the
/// common name of its subject. `None` when the bytes are not a certificate
/// or it names nobody.
///
/// The certificate is not verified here; the TLS handshake did that.
pub fn identity_of(cert_der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names = &san.value.general_names;
        let uri = names.iter().find_map(|name| match name {
            GeneralName::URI(uri) if !uri.is_empty() => Some(*uri),
            _ => None,
        });
        let dns = || {
            names.iter().find_map(|name| match name {
                GeneralName::DNSName(dns) if !dns.is_empty() => Some(*dns),
                _ => None,
            })
        };
        if let Some(name) = uri.or_else(dns) {
            return Some(name.to_owned());
        }
    }
    cert.subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok().filter(|s| !s.is_empty()))
        .map(str::to_owned)
}

/// The client identity in an `x-forwarded-client-cert` header as Envoy
/// writes it (`By=…;Hash=…;Subject="…";URI=…;DNS=…`, elements separated by
/// commas, values optionally quoted with `\"` escapes): the element the
/// nearest proxy appended (the last one, so an element the client sent
/// itself is never taken), its `URI`, else its `DNS`, else the `CN` of its
/// `Subject` — the same order as [`identity_of`]. `None` when the header is
/// malformed or names nobody.
pub fn forwarded_identity(header: &str) -> Option<String> {
    let elements = split_unquoted(header, ',')?;
    let element = elements.last()?;
    let mut uri = None;
    let mut dns = None;
    let mut subject = None;
    for pair in split_unquoted(element, ';')? {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=')?;
        let value = unquote(value.trim())?;
        let slot = match key.trim().to_ascii_lowercase().as_str() {
            "uri" => &mut uri,
            "dns" => &mut dns,
            "subject" => &mut subject,
            _ => continue,
        };
        if slot.is_none() && !value.is_empty() {
            *slot = Some(value);
        }
    }
    uri.or(dns)
        .or_else(|| subject.as_deref().and_then(common_name))
}

/// Splits at `sep` outside double quotes (a backslash escapes the next
/// character inside them); `None` for an unterminated quote.
fn split_unquoted(text: &str, sep: char) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&text[start..i]);
            start = i + 1;
        }
    }
    if quoted {
        return None;
    }
    parts.push(&text[start..]);
    Some(parts)
}

/// A value as written, or the inside of `"…"` with `\"` read as `"` (other
/// backslashes stay: they are the distinguished name's own escapes).
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return (!value.contains('"')).then(|| value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'"') {
            continue;
        }
        out.push(c);
    }
    Some(out)
}

/// The `CN` of an RFC 4514 distinguished name (`CN=a\,b,O=x`), with its
/// escapes (`\,`, `\+`, `\2C`) read.
fn common_name(dn: &str) -> Option<String> {
    // OpenSSL's one-line form, `/C=US/O=Org/CN=name`, which Envoy once wrote.
    if let Some(rest) = dn.strip_prefix('/') {
        return rest.split('/').find_map(|rdn| {
            let (key, value) = rdn.split_once('=')?;
            (key.trim().eq_ignore_ascii_case("cn") && !value.is_empty()).then(|| value.to_owned())
        });
    }
    let mut rdns = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in dn.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' || c == '+' {
            rdns.push(&dn[start..i]);
            start = i + 1;
        }
    }
    rdns.push(&dn[start..]);
    rdns.into_iter().find_map(|rdn| {
        let (key, value) = rdn.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("cn") {
            return None;
        }
        let value = unescape_dn(value.trim())?;
        (!value.is_empty()).then_some(value)
    })
}

fn unescape_dn(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(byte) => {
                    out.push(byte);
                    i += 3;
                }
                None => {
                    out.push(*bytes.get(i + 1)?);
                    i += 2;
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a `--tls-client-roles` file: one `IDENTITY ROLE` a line (the role
/// is the last word, so an identity may hold spaces, as a common name can),
/// blank lines and `#` comments ignored. The identity is what
/// [`identity_of`] or [`forwarded_identity`] returns; the role one of
/// [`ROLE_NAMES`]. An identity listed twice, an unknown role or a line
/// without a role is an error naming its line. An identity absent from the
/// map has no role.
pub fn parse_client_roles(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut roles = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let number = n + 1;
        let Some((identity, role)) = line.rsplit_once(char::is_whitespace) else {
            return Err(format!(
                "line {number}: expected \"IDENTITY ROLE\", found {line:?}"
            ));
        };
        let identity = identity.trim();
        if !ROLE_NAMES.contains(&role) {
            return Err(format!(
                "line {number}: unknown role {role:?} (one of {})",
                ROLE_NAMES.join(", ")
            ));
        }
        if roles.insert(identity.to_owned(), role.to_owned()).is_some() {
            return Err(format!("line {number}: {identity:?} is listed twice"));
        }
    }
    Ok(roles)
}

/// Reads and parses a `--tls-client-roles` file (see [`parse_client_roles`]).
pub fn load_client_roles(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --tls-client-roles {}", path.display()))?;
    parse_client_roles(&text)
        .map_err(|err| anyhow::anyhow!("--tls-client-roles {}: {err}", path.display()))
}

/// Refuses a listen address off loopback unless callers must authenticate
/// (TLS, bearer tokens) or the operator said `--insecure`; the message names
/// the address and the three ways out.
pub fn check_exposure(
    listen: SocketAddr,
    tls: bool,
    tokens: bool,
    insecure: bool,
) -> anyhow::Result<()> {
    if listen.ip().is_loopback() || tls || tokens || insecure {
        return Ok(());
    }
    bail!(
        "refusing to listen on non-loopback address {listen} without authentication: stepd runs \
         arbitrary code for whoever can reach it. Pass one of: --tls-cert FILE --tls-key FILE \
         (with --tls-client-ca FILE for mutual TLS), --auth-tokens FILE (bearer tokens), or \
         --insecure (STEPD_INSECURE=1) only behind something that authenticates callers, such \
         as a mesh sidecar enforcing mTLS"
    )
}

/// The files of the TCP listener's TLS, as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct ServerTlsFiles {
    /// `--tls-cert`: the PEM certificate chain served.
    pub cert: Option<PathBuf>,
    /// `--tls-key`: its private key.
    pub key: Option<PathBuf>,
    /// `--tls-client-ca`: the CAs a client certificate must come from.
    pub client_ca: Option<PathBuf>,
}

/// The TLS settings of the TCP listener, read and checked now so that a bad
/// file stops the daemon at start with its name; `None` without `--tls-cert`.
/// TLS 1.2 and 1.3 with rustls' safe defaults, HTTP/2 by ALPN; with
/// `--tls-client-ca`, a client certificate from it is mandatory.
pub fn server_config(files: &ServerTlsFiles) -> anyhow::Result<Option<Arc<ServerConfig>>> {
    let (Some(cert_path), Some(key_path)) = (&files.cert, &files.key) else {
        return Ok(None);
    };
    let chain = certificates(&read(cert_path, "--tls-cert")?, cert_path, "--tls-cert")?;
    tracing::debug!(certificates = chain.len(), path = %cert_path.display(), "server certificate chain");
    let key = PrivateKeyDer::from_pem_slice(&read(key_path, "--tls-key")?).map_err(|err| {
        anyhow::anyhow!(
            "--tls-key {}: no PEM private key (PKCS#8, PKCS#1 or SEC1): {err}",
            key_path.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("choosing TLS versions")?;
    let builder = match &files.client_ca {
        Some(ca_path) => {
            let mut roots = RootCertStore::empty();
            let cas = read(ca_path, "--tls-client-ca")?;
            for ca in certificates(&cas, ca_path, "--tls-client-ca")? {
                roots.add(ca).map_err(|err| {
                    anyhow::anyhow!("--tls-client-ca {}: {err}", ca_path.display())
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(|| format!("--tls-client-ca {}", ca_path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder.with_single_cert(chain, key).with_context(|| {
        format!(
            "--tls-cert {} with --tls-key {}",
            cert_path.display(),
            key_path.display()
        )
    })?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Arc::new(tls)))
}

fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
}

fn certificates(
    pem: &[u8],
    path: &Path,
    flag: &str,
) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| anyhow::anyhow!("{flag} {}: bad PEM: {err}", path.display()))?;
    if certs.is_empty() {
        bail!("{flag} {}: no PEM certificate in it", path.display());
    }
    Ok(certs)
}

mod handshake;
mod layer;
mod refusal;

pub use handshake::Handshakes;
pub use layer::IdentityLayer;

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    use super::*;

    fn cert(sans: Vec<SanType>, cn: Option<&str>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params
            .distinguished_name
            .push(DnType::OrganizationName, "stepd tests");
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().unwrap())
    }

    fn uri(name: &str) -> SanType {
        SanType::URI(name.try_into().unwrap())
    }

    #[test]
    fn identity_prefers_uri_then_dns_then_cn() {
        let spiffe = "spiffe://example.org/ns/ci/sa/runner";
        assert_eq!(
            identity_of(&cert(vec![dns("ci.example.org"), uri(spiffe)], Some("cn"))).as_deref(),
            Some(spiffe)
        );
        assert_eq!(
            identity_of(&cert(
                vec![
                    SanType::IpAddress("10.0.0.1".parse().unwrap()),
                    dns("ci.example.org")
                ],
                Some("cn")
            ))
            .as_deref(),
            Some("ci.example.org")
        );
        assert_eq!(
            identity_of(&cert(
                vec![SanType::IpAddress("10.0.0.1".parse().unwrap())],
                Some("Jane Doe")
            ))
            .as_deref(),
            Some("Jane Doe")
        );
        assert_eq!(identity_of(&cert(vec![], None)), None);
        assert_eq!(identity_of(b"not a certificate"), None);
        assert_eq!(identity_of(&[]), None);
    }

    #[test]
    fn forwarded_identity_of_envoy_headers() {
        // Envoy's documented examples.
        let full = r#"By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=http://testclient.lyft.com"#;
        assert_eq!(
            forwarded_identity(full).as_deref(),
            Some("http://testclient.lyft.com")
        );
        let subject_only = r#"By=http://frontend.lyft.com;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;Subject="CN=Test Client,OU=Lyft,L=San Francisco,ST=California,C=US""#;
        assert_eq!(
            forwarded_identity(subject_only).as_deref(),
            Some("Test Client")
        );
        let dns = "By=spiffe://cluster.local/ns/a/sa/stepd;Hash=abc;DNS=client.example.org;DNS=other.example.org";
        assert_eq!(
            forwarded_identity(dns).as_deref(),
            Some("client.example.org")
        );
        // Two elements: the nearest proxy's (the last) wins, whatever the
        // client sent before it.
        let two = r#"By=x;URI=spiffe://evil/forged,By=spiffe://cluster.local/ns/a/sa/stepd;Hash=abc;Subject="";URI=spiffe://cluster.local/ns/ci/sa/runner"#;
        assert_eq!(
            forwarded_identity(two).as_deref(),
            Some("spiffe://cluster.local/ns/ci/sa/runner")
        );
        // Quoted values may hold commas, semicolons and escaped quotes.
        let quoted = r#"Hash=abc;Subject="CN=Doe\, Jane;x=\"y\",O=Org""#;
        assert_eq!(
            forwarded_identity(quoted).as_deref(),
            Some("Doe, Jane;x=\"y\"")
        );
        let hex = r#"Subject="CN=a\2Cb,O=Org""#;
        assert_eq!(forwarded_identity(hex).as_deref(), Some("a,b"));
        let openssl = r#"Hash=abc;Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client""#;
        assert_eq!(forwarded_identity(openssl).as_deref(), Some("Test Client"));
        // Keys are case-insensitive; an empty URI falls through to DNS.
        assert_eq!(
            forwarded_identity("hash=abc;uri=;dns=x.example").as_deref(),
            Some("x.example")
        );
    }

    #[test]
    fn forwarded_identity_refuses_malformed_or_anonymous() {
        assert_eq!(forwarded_identity(""), None);
        assert_eq!(forwarded_identity("By=x;Hash=abc"), None);
        assert_eq!(forwarded_identity(r#"Subject="CN=unterminated"#), None);
        assert_eq!(forwarded_identity("URI"), None);
        assert_eq!(forwarded_identity(r#"Subject="O=NoCommonName""#), None);
        // A good element followed by an anonymous one names nobody.
        assert_eq!(forwarded_identity("URI=spiffe://a,Hash=abc"), None);
    }

    #[test]
    fn roles_file() {
        let roles = parse_client_roles(
            "# identity role\n\nspiffe://cluster.local/ns/ci/sa/runner controller\n  Jane Doe   admin  \nprobe.example.org probe\n",
        )
        .unwrap();
        assert_eq!(roles.len(), 3);
        assert_eq!(
            roles["spiffe://cluster.local/ns/ci/sa/runner"],
            "controller"
        );
        assert_eq!(roles["Jane Doe"], "admin");
        assert_eq!(roles["probe.example.org"], "probe");
        assert!(!roles.contains_key("nobody"));

        let err = parse_client_roles("a viewer\nb root\n").unwrap_err();
        assert!(err.contains("line 2") && err.contains("root"), "{err}");
        let err = parse_client_roles("lonely\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err = parse_client_roles("a viewer\na admin\n").unwrap_err();
        assert!(err.contains("twice"), "{err}");
        assert!(parse_client_roles("").unwrap().is_empty());
    }

    #[test]
    fn exposure_rule() {
        let off: SocketAddr = "0.0.0.0:7701".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:7701".parse().unwrap();
        assert!(check_exposure(local, false, false, false).is_ok());
        assert!(check_exposure("[::1]:1".parse().unwrap(), false, false, false).is_ok());
        let err = check_exposure(off, false, false, false)
            .unwrap_err()
            .to_string();
        for needle in ["0.0.0.0:7701", "--tls-cert", "--auth-tokens", "--insecure"] {
            assert!(err.contains(needle), "{needle} missing: {err}");
        }
        assert!(check_exposure(off, true, false, false).is_ok());
        assert!(check_exposure(off, false, true, false).is_ok());
        assert!(check_exposure(off, false, false, true).is_ok());
    }
}
