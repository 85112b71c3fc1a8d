"""Handshake and daemon RPCs against the real stepd."""

from __future__ import annotations

import uuid

import stepd
from conftest import Daemon


def test_ping_handshake(client: stepd.Client) -> None:
    pong = client.ping()
    assert pong.protocol_version == "stepd.v1"
    assert pong.version and pong.version[0].isdigit()
    assert uuid.UUID(pong.instance_id)
    assert pong.server_time.seconds > 0
    # the instance id is stable for one process
    assert client.ping().instance_id == pong.instance_id


def test_status_version_doctor(client: stepd.Client, daemon: Daemon) -> None:
    status = client.get_status()
    assert status.instance_id == client.ping().instance_id
    assert any(addr.endswith(daemon.tcp.rsplit(":", 1)[1]) for addr in status.listen)
    version = client.get_version()
    assert version.protocol_version == "stepd.v1"
    assert version.version == status.version
    doctor = client.doctor()
    assert {a.adapter for a in doctor.adapters} >= {"debugpy", "lldb", "dlv", "gdb"}


def test_unix_socket_address(daemon: Daemon) -> None:
    assert daemon.unix, "the daemon was started with a unix socket"
    with stepd.Client(f"unix:{daemon.unix}") as over_unix, daemon.client() as over_tcp:
        assert over_unix.ping().instance_id == over_tcp.ping().instance_id


def test_address_from_environment(daemon: Daemon, monkeypatch: "object") -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("STEPD_ADDR", daemon.tcp)
    with stepd.Client() as c:
        assert c.addr == daemon.tcp
        assert c.ping().protocol_version == "stepd.v1"
    monkeypatch.delenv("STEPD_ADDR")
    assert stepd.Client().addr == "127.0.0.1:7701"


def test_unreachable_daemon_is_unavailable(tmp_path: "object") -> None:
    import pytest

    with stepd.Client("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(stepd.errors.Unavailable) as info:
            c.ping()
    assert info.value.reason == ""
