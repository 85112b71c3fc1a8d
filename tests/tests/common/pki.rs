//! A test PKI made with rcgen, for the tests that speak TLS.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority: its PEM, and what signs with it.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A self-signed CA named `name`.
pub fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf certificate signed by `ca`: (certificate PEM, key PEM, DER).
pub fn leaf(
    ca: &Ca,
    cn: &str,
    sans: Vec<SanType>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String, Vec<u8>) {
    leaf_with(ca, cn, sans, usage, |_| {})
}

/// [`leaf`], its parameters changed by `edit` first (a validity in the
/// past, say).
#[allow(dead_code)]
pub fn leaf_with(
    ca: &Ca,
    cn: &str,
    sans: Vec<SanType>,
    usage: ExtendedKeyUsagePurpose,
    edit: impl FnOnce(&mut CertificateParams),
) -> (String, String, Vec<u8>) {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![usage];
    edit(&mut params);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}
