"""A program using the client as its users would; `mypy --strict` checks it
(test_package.py, against the installed wheel)."""

from __future__ import annotations

import sys

from google.protobuf import json_format

import stepd
from stepd import enums, errors
from stepd.v1 import pause_pb2


def debug(client: stepd.Client, program: str) -> dict[str, str]:
    with client.launch(program, adapter="debugpy") as session:
        placed: list[str] = [p.breakpoint_id for p in session.breakpoints]
        print(session.session.pid, placed)
        pause: stepd.Pause = session.wait_for_pause(timeout=30)
        if pause.reason == enums.PauseReason.BREAKPOINT or pause.reason == enums.PauseReason.STEP:
            print(repr(pause.reason), pause.location.line, session.eval("1 + 1"))
        state: stepd.State = session.step("over")
        if state.pause is not None and state.stop_reason == enums.PauseReason.STEP:
            print(state.pause.revision)
        found: dict[str, str] = session.locals()
        print(session.continue_().state == enums.SessionState.ENDED, session.output())
        return found


def answer_all(client: stepd.Client) -> int:
    answered = 0
    with client.pauses() as pauses:
        for pause in pauses:
            resent: stepd.Pause | None = pauses.answer(pause, "eval", code="_")
            if resent is not None:
                pauses.answer(resent, enums.CommandKind.CONTINUE)
            answered += 1
    return answered


def raw(message: pause_pb2.Pause) -> enums.PauseReason:
    return enums.PauseReason(message.reason)


def as_json(pause: stepd.Pause) -> str:
    return json_format.MessageToJson(pause.message)


def main() -> int:
    try:
        with stepd.Client() as client:
            print(client.ping().version)
            with client.events(follow_restarts=True) as events:
                print(events.next(timeout=5).seq)
    except errors.Unavailable as err:
        print(err.code, err.reason, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
