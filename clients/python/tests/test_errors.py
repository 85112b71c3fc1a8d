"""Every error reason reachable today surfaces as its typed exception."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

import stepd
from conftest import Daemon
from stepd import errors
from stepd.v1 import errors_pb2


def test_every_reason_has_a_distinct_class() -> None:
    names = [n for n in errors_pb2.ErrorReason.keys() if n != "ERROR_REASON_UNSPECIFIED"]
    reasons = [n.removeprefix("ERROR_REASON_") for n in names]
    assert sorted(errors.REASONS) == sorted(reasons)
    classes = [errors.error_class(r) for r in reasons]
    assert len(set(classes)) == len(classes)
    for reason, cls in zip(reasons, classes):
        assert issubclass(cls, errors.StepdError) and cls is not errors.StepdError
        assert cls.REASON == reason
        assert errors.error_class(errors_pb2.ErrorReason.Value("ERROR_REASON_" + reason)) is cls
        assert cls.__name__ in errors.__all__
    assert errors.error_class("NOT_IMPLEMENTED") is errors.NotImplemented_
    assert errors.error_class("SOMETHING_NEW") is errors.StepdError
    assert errors.error_class(0) is errors.StepdError


def test_error_attributes() -> None:
    err = errors.PauseNotFound("gone", code=grpc.StatusCode.NOT_FOUND, metadata={"key": "k"})
    assert (err.reason, err.code, err.metadata, err.field_violations) == ("PAUSE_NOT_FOUND", grpc.StatusCode.NOT_FOUND, {"key": "k"}, [])
    assert str(err) == "PAUSE_NOT_FOUND: gone"


def test_invalid_argument(client: stepd.Client) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        client.add_breakpoint(path="/x.py", line=0)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.domain == errors.ERROR_DOMAIN
    assert [v.field for v in info.value.field_violations] == ["spec.source.line"]


def test_breakpoint_not_found(client: stepd.Client) -> None:
    with pytest.raises(errors.BreakpointNotFound) as info:
        client.remove_breakpoint("bp-424242")
    assert info.value.code == grpc.StatusCode.NOT_FOUND


def test_pause_not_found(client: stepd.Client) -> None:
    with pytest.raises(errors.PauseNotFound) as info:
        client.send_debug_input("no-such-key", "next")
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.metadata["key"] == "no-such-key"


def test_session_not_found(client: stepd.Client) -> None:
    with pytest.raises(errors.SessionNotFound) as info:
        client.get_session("01900000-0000-7000-8000-000000000000")
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.metadata["session_id"] == "01900000-0000-7000-8000-000000000000"


def test_inspector_not_found(client: stepd.Client) -> None:
    with pytest.raises(errors.InspectorNotFound) as info:
        client.clear("no-such-inspector")
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.reason == "INSPECTOR_NOT_FOUND"
    assert info.value.metadata["inspector_id"] == "no-such-inspector"


def test_limit_exceeded(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = Daemon(tmp_path_factory.mktemp("limits"), "--max-subscribers", "1", unix_socket=False)
    try:
        with d.client() as c:
            with c.events() as first:
                assert first.next(timeout=10).HasField("snapshot")
                second = c.events()
                with pytest.raises(errors.LimitExceeded) as info:
                    second.next(timeout=10)
                second.close()
                assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert info.value.metadata.get("limit") == "max_subscribers"
                assert second.reconnects == 0, "a refusal is not retried"
            # the slot is free again once the first stream is closed
            deadline = time.monotonic() + 10
            while c.get_status().subscribers != 0:
                assert time.monotonic() < deadline, "the closed stream still holds its slot"
            with c.events() as third:
                assert third.next(timeout=10).HasField("snapshot")
    finally:
        d.stop()


def test_long_ids_are_quoted_not_echoed(client: stepd.Client) -> None:
    """A 100 KB id is quoted as a short prefix: the status fits grpcio's
    trailer limit, so the typed reason arrives (it was RESOURCE_EXHAUSTED
    without one when the whole id was echoed)."""
    long = "x" * 100_000
    calls: list[tuple[type[errors.StepdError], str, Any]] = [
        (errors.SessionNotFound, "session_id", lambda: client.get_session(long)),
        (errors.PauseNotFound, "key", lambda: client.send_debug_input(long, "next")),
        (errors.InvalidArgument, "field", lambda: client.remove_breakpoint(long)),
        (errors.BreakpointNotFound, "breakpoint_id", lambda: client.remove_breakpoint("bp-" + "0" * 100_000 + "424242")),
    ]
    for cls, key, call in calls:
        with pytest.raises(cls) as info:
            call()
        assert len(info.value.message) < 300, info.value.message
        assert "…" in info.value.message or cls is errors.InvalidArgument
        assert all(len(v) <= 100 for v in info.value.metadata.values()), info.value.metadata
        assert key in info.value.metadata
