"""BreakpointService through the client."""

from __future__ import annotations

import pytest

import stepd
from stepd import errors
from stepd.v1 import breakpoint_pb2


def test_add_list_update_remove(client: stepd.Client) -> None:
    before = [bp.id for bp in client.list_breakpoints().breakpoints]
    added = client.add_breakpoint(path="/src/app.py", line=12, condition="n > 3", hit_condition=">=2").breakpoint
    assert added.id and added.id not in before
    assert added.spec.source.path == "/src/app.py"
    assert added.spec.source.line == 12
    assert added.spec.enabled is True
    assert added.spec.condition == "n > 3"
    func = client.add_breakpoint(function="main", action="log", log_message="hit {n}").breakpoint
    assert func.spec.WhichOneof("location") == "function"
    assert func.spec.action == breakpoint_pb2.BREAKPOINT_ACTION_LOG

    listed = [bp.id for bp in client.list_breakpoints().breakpoints]
    assert listed == before + [added.id, func.id]

    disabled = client.update_breakpoint(added.id, enabled=False).breakpoint
    assert disabled.spec.enabled is False
    # only the masked field changed
    assert disabled.spec.condition == "n > 3"
    assert disabled.spec.source.line == 12
    stored = {bp.id: bp for bp in client.list_breakpoints().breakpoints}[added.id]
    assert stored.spec.enabled is False

    moved = client.update_breakpoint(added.id, update_mask=["condition"], condition="", line=99).breakpoint
    assert moved.spec.condition == ""
    assert moved.spec.source.line == 12, "line is not in the mask"
    assert client.enable_breakpoint(added.id).breakpoint.spec.enabled is True

    removed = client.remove_breakpoint(added.id).breakpoint
    assert removed.id == added.id
    client.remove_breakpoint(func.id)
    assert [bp.id for bp in client.list_breakpoints().breakpoints] == before


def test_spec_message_and_probe_breakpoint(client: stepd.Client) -> None:
    spec = breakpoint_pb2.BreakpointSpec(probe=breakpoint_pb2.ProbeMatch(point_kind="tool_call", name_glob="web_*"))
    bp = client.add_breakpoint(spec, label_selector="team=agents", max_hits=3).breakpoint
    try:
        assert bp.spec.probe.name_glob == "web_*"
        assert bp.spec.label_selector == "team=agents"
        assert bp.spec.max_hits == 3
        matching = client.list_breakpoints(for_labels={"team": "agents"}).breakpoints
        assert bp.id in [b.id for b in matching]
        other = client.list_breakpoints(for_labels={"team": "web"}).breakpoints
        assert bp.id not in [b.id for b in other]
    finally:
        client.remove_breakpoint(bp.id)


def test_invalid_breakpoint_has_field_violations(client: stepd.Client) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        client.add_breakpoint(path="", line=0)
    err = info.value
    assert err.reason == "INVALID_ARGUMENT"
    assert err.code.name == "INVALID_ARGUMENT"
    fields = {v.field for v in err.field_violations}
    assert {"spec.source.path", "spec.source.line"} <= fields
    assert all(v.description for v in err.field_violations)

    with pytest.raises(errors.InvalidArgument) as info:
        client.add_breakpoint()
    assert [v.field for v in info.value.field_violations] == ["spec.location"]

    with pytest.raises(errors.InvalidArgument) as info:
        client.add_breakpoint(path="/a.py", line=1, hit_condition="sometimes")
    assert "spec.hit_condition" in {v.field for v in info.value.field_violations}


def test_unknown_breakpoint(client: stepd.Client) -> None:
    with pytest.raises(errors.BreakpointNotFound) as info:
        client.remove_breakpoint("bp-999999")
    assert info.value.code.name == "NOT_FOUND"
    assert info.value.metadata.get("breakpoint_id") == "bp-999999"
    with pytest.raises(errors.BreakpointNotFound):
        client.update_breakpoint("bp-999999", enabled=False)
