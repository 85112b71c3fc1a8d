"""The API's enums by name (stepd.enums)."""

from __future__ import annotations

import pytest

import stepd
from stepd import enums
from stepd.v1 import event_pb2, pause_pb2, session_pb2


def test_members_compare_with_their_names_and_numbers() -> None:
    reason = enums.PauseReason(pause_pb2.PAUSE_REASON_BREAKPOINT)
    assert reason == "BREAKPOINT" and reason == "breakpoint" and reason == "PAUSE_REASON_BREAKPOINT"
    assert reason == 1 and reason == pause_pb2.PAUSE_REASON_BREAKPOINT
    assert reason != "STEP" and reason != 2
    with pytest.raises(ValueError, match="not a PauseReason"):
        _ = reason == "BREAKPOINTS"  # a misspelt name is an error, not just unequal
    assert repr(reason) == "PauseReason.BREAKPOINT"
    assert str(reason) == "BREAKPOINT" and f"{reason}" == "BREAKPOINT" and f"{reason:>12}" == "  BREAKPOINT"
    assert repr([enums.CommandKind.EVAL, enums.CommandKind.IN]) == "[CommandKind.EVAL, CommandKind.IN]"
    assert {1: "x"}[reason] == "x" and reason in {enums.PauseReason.BREAKPOINT}


def test_of_reads_a_name_or_a_number() -> None:
    assert enums.SessionState.of("stopped") is enums.SessionState.STOPPED
    assert enums.SessionState.of("SESSION_STATE_ENDED") is enums.SessionState.ENDED
    assert enums.StepKind.of(2) is enums.StepKind.IN
    with pytest.raises(ValueError, match="not a StepKind"):
        enums.StepKind.of("sideways")


def test_every_enum_of_the_api_is_generated_with_its_values() -> None:
    modules = [event_pb2, pause_pb2, session_pb2]
    for module in modules:
        for name, descriptor in module.DESCRIPTOR.enum_types_by_name.items():
            cls = enums.BY_PROTO_NAME[descriptor.full_name]
            assert cls.__name__ == name
            assert {m.name: int(m) for m in cls} == {
                v.name.removeprefix(cls.prefix()): v.number for v in descriptor.values
            }


def test_members_are_accepted_as_arguments() -> None:
    assert stepd.command(enums.CommandKind.EVAL, code="x").HasField("eval")
    assert stepd.debug_input("k", enums.CommandKind.CONTINUE).command.HasField("resume")


def test_views_read_enum_fields_by_name() -> None:
    pause = stepd.Pause(pause_pb2.Pause(key="k", reason=pause_pb2.PAUSE_REASON_HOLD, input_type=[5, 9, 999]))
    assert pause.reason == "HOLD" and pause.input_type == ["CONTINUE", "EVAL", 999]  # unknown numbers stay ints
    assert repr(pause) == "Pause(key='k', reason=PauseReason.HOLD, revision=0)"
    state = stepd.State(session_pb2.StableState(state=session_pb2.SESSION_STATE_ENDED, end_reason=1))
    assert state.state == "ENDED" and state.end_reason == "EXITED" and state.pause is None
    assert state.waited is False  # other fields read as on the message
