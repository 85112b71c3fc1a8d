"""TLS, mutual TLS and bearer tokens in the Python clients, against a real
daemon that requires client certificates. The certificates are made here: a
CA, a server certificate for 127.0.0.1 and localhost, a client certificate
from that CA and one from another CA."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import stepd
import stepd.aio
import stepd.probe
from conftest import Daemon
from stepd import _build

CLIENT_ID = "spiffe://stepd.test/ns/ci/sa/python"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    cn: str,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    out: Path,
    stem: str,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca[1], hashes.SHA256())
    )
    (out / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, out / f"{stem}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    ca = _ca("stepd test CA")
    other = _ca("another CA")
    (out / "ca.pem").write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    _leaf(
        ca, "stepd",
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
        ExtendedKeyUsageOID.SERVER_AUTH, out, "server",
    )
    _leaf(ca, "python", [x509.UniformResourceIdentifier(CLIENT_ID)], ExtendedKeyUsageOID.CLIENT_AUTH, out, "client")
    _leaf(other, "intruder", [x509.UniformResourceIdentifier(CLIENT_ID)], ExtendedKeyUsageOID.CLIENT_AUTH, out, "other")
    (out / "roles").write_text(f"{CLIENT_ID} admin\n")
    return out


@pytest.fixture(scope="module")
def mtls_daemon(tmp_path_factory: pytest.TempPathFactory, pki: Path) -> Iterator[Daemon]:
    d = Daemon(
        tmp_path_factory.mktemp("stepd-mtls"),
        "--tls-cert", str(pki / "server.pem"),
        "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.pem"),
        "--tls-client-roles", str(pki / "roles"),
        "--health-listen", "127.0.0.1:0",
    )
    yield d
    # The fixture's plaintext Shutdown cannot reach it; stop() falls back to SIGTERM.
    d.stop()


def _tls(pki: Path, who: str | None = "client") -> dict[str, str]:
    options = {"tls_ca": str(pki / "ca.pem")}
    if who:
        options |= {"tls_cert": str(pki / f"{who}.pem"), "tls_key": str(pki / f"{who}.key")}
    return options


def test_sync_client_over_mtls(mtls_daemon: Daemon, pki: Path) -> None:
    with stepd.Client(mtls_daemon.tcp, timeout=10, **_tls(pki)) as client:  # type: ignore[arg-type]
        assert client.ping().version
    with stepd.Client(f"https://{mtls_daemon.tcp}", timeout=10, **_tls(pki)) as client:  # type: ignore[arg-type]
        assert client.ping().version


@pytest.mark.parametrize("who", [None, "other"])
def test_sync_client_without_a_good_certificate_is_refused(mtls_daemon: Daemon, pki: Path, who: str | None) -> None:
    with stepd.Client(mtls_daemon.tcp, timeout=5, **_tls(pki, who)) as client:  # type: ignore[arg-type]
        with pytest.raises(stepd.StepdError):
            client.ping()
    with stepd.Client(mtls_daemon.tcp, timeout=5) as client:
        with pytest.raises(stepd.StepdError):
            client.ping()


def test_environment_variables(mtls_daemon: Daemon, pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPD_ADDR", mtls_daemon.tcp)
    monkeypatch.setenv("STEPD_TLS_CA", str(pki / "ca.pem"))
    monkeypatch.setenv("STEPD_TLS_CERT", str(pki / "client.pem"))
    monkeypatch.setenv("STEPD_TLS_KEY", str(pki / "client.key"))
    with stepd.Client(timeout=10) as client:
        assert client.ping().version


def test_aio_client_over_mtls(mtls_daemon: Daemon, pki: Path) -> None:
    async def main() -> str:
        async with stepd.aio.Client(mtls_daemon.tcp, timeout=10, **_tls(pki)) as client:  # type: ignore[arg-type]
            return (await client.ping()).version

    assert asyncio.run(main())


def test_probe_connects_over_mtls(mtls_daemon: Daemon, pki: Path) -> None:
    probe = stepd.probe.connect("tls-probe", addr=mtls_daemon.tcp, wait=10, **_tls(pki))
    try:
        assert probe.connected, "the probe was not welcomed over mTLS"
        assert probe.session_id
    finally:
        probe.close()


def test_health_listener_needs_no_credentials(mtls_daemon: Daemon) -> None:
    assert mtls_daemon.health, "the ready line names the health listener"
    with grpc.insecure_channel(mtls_daemon.health) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        # An empty HealthCheckRequest; the answer is `status: SERVING` (1).
        assert check(b"", timeout=10) == b"\x08\x01"


def test_token_metadata_and_local_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STEPD_ADDR", "STEPD_TOKEN", "STEPD_TLS_CA", "STEPD_TLS_CERT", "STEPD_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STEPD_DATA_DIR", str(tmp_path))
    assert _build.transport(None).metadata == ()
    (tmp_path / "token").write_text("local-secret\n")
    # The default local daemon: its token file is sent.
    assert _build.transport(None).metadata == (("authorization", "Bearer local-secret"),)
    # Another address: never the local file.
    assert _build.transport("127.0.0.1:9").metadata == ()
    # An explicit token, or $STEPD_TOKEN, wins.
    assert _build.transport("127.0.0.1:9", token="t1").metadata == (("authorization", "Bearer t1"),)
    monkeypatch.setenv("STEPD_TOKEN", "t2")
    assert _build.transport(None).metadata == (("authorization", "Bearer t2"),)
    # A client carries it on every call.
    client = stepd.Client("127.0.0.1:9", token="t3")
    assert ("authorization", "Bearer t3") in client.metadata
    client.close()
    with pytest.raises(ValueError):
        _build.transport("127.0.0.1:9", tls_cert="c.pem")
