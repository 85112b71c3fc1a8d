"""A small agent loop instrumented with stepd probes.

    python examples/agent_loop/agent.py "what is 6*7?"

The model is a deterministic offline stand-in (no network, no weights); the
tools are a calculator, a file reader confined to a temporary directory, a
fake web search with canned results, and `research`, which hands the task to
a sub-agent. Every turn passes the six pause points of an agent turn:

    prompt          the user's text, before it enters (editable)
    model_request   model and effort, before the model is called (editable, JSON Schema)
    model_response  the model's text and tool calls, before they are used (editable)
    tool_call       a tool's arguments, before it runs (editable, or SKIP the call)
    tool_result     the text the model will read (editable)
    turn_end        the answer, before the turn is reported done

plus observed-only points (`skill_loaded`, `web_source`) and a `tool_error`
point that exists only when a tool raises. The sub-agent has its own probe
labelled ``agent=sub`` (so breakpoints choose it with a label selector).

With no daemon at $STEPD_ADDR the agent runs the same, without holding.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

try:
    import stepd
except ImportError:  # run from a checkout without the client installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import stepd
from stepd.probe import Probe

MODELS = ("offline-small", "offline-large")
EFFORTS = ("low", "medium", "high")

#: What a client may inject at model_request.
REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model", "effort"],
    "properties": {
        "model": {"type": "string", "enum": list(MODELS)},
        "effort": {"type": "string", "enum": list(EFFORTS)},
        "messages": {"type": "array"},
    },
    "additionalProperties": False,
}

#: What a client may inject at model_response.
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["text"],
    "properties": {"text": {"type": "string"}, "tool_calls": {"type": "array"}},
    "additionalProperties": False,
}

SEARCH_RESULTS = {
    "stepd": [("https://example.com/stepd", "stepd is a debugging daemon with a gRPC API.")],
    "python": [("https://example.com/python", "Python is a programming language.")],
}
DEFAULT_RESULTS = [("https://example.com/search", "No canned result; the answer is probably 42.")]


def say(line: str) -> None:
    print(line, flush=True)


# -- tools ------------------------------------------------------------------------------

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def calculator(expression: str) -> str:
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not arithmetic: {expression!r}")

    result = ev(ast.parse(str(expression), mode="eval").body)
    return str(int(result) if isinstance(result, float) and result.is_integer() else result)


class Tools:
    def __init__(self, root: Path, sub_agent: Callable[[str], str] | None) -> None:
        self.root = root
        self.sub_agent = sub_agent

    def names(self) -> list[str]:
        return ["calculator", "read_file", "web_search"] + (["research"] if self.sub_agent else [])

    def run(self, name: str, args: dict[str, Any], probe: Probe) -> str:
        if name == "calculator":
            return calculator(args["expression"])
        if name == "read_file":
            path = (self.root / str(args["path"])).resolve()
            if self.root.resolve() not in path.parents:
                raise PermissionError(f"{args['path']} is outside the sandbox")
            return path.read_text().strip()
        if name == "web_search":
            query = str(args["query"])
            hits = next((v for k, v in SEARCH_RESULTS.items() if k in query.lower()), DEFAULT_RESULTS)
            for url, _ in hits:
                probe.observe("web_source", "web_search", {"query": query, "url": url})
            return " ".join(text for _, text in hits)
        if name == "research" and self.sub_agent is not None:
            return self.sub_agent(str(args["task"]))
        raise KeyError(f"no tool {name!r}")


# -- the model stand-in ----------------------------------------------------------------------

_ARITHMETIC = re.compile(r"[-(]*\d[\d\s.+\-*/()]*")


def offline_model(model: str, effort: str, messages: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """Deterministic: picks a tool for the question, then answers from its result."""
    last = messages[-1]
    if last["role"] == "tool":
        content = str(last["content"])
        text = content if content.startswith("The answer is") else f"The answer is {content}"
        if effort == "high":
            text += " (checked twice)"
        return {"text": text, "tool_calls": []}
    question = str(last["content"])
    lower = question.lower()
    match = max(_ARITHMETIC.findall(question), key=len, default="").strip()
    if match and any(op in match for op in "+-*/"):
        call = {"name": "calculator", "args": {"expression": match}}
    elif "file" in lower or "notes" in lower:
        call = {"name": "read_file", "args": {"path": "notes.txt"}}
    elif "research" in lower and "research" in tools:
        call = {"name": "research", "args": {"task": question}}
    elif "?" in question or "search" in lower or "research" in lower:
        call = {"name": "web_search", "args": {"query": question}}
    else:
        return {"text": "I can do arithmetic, read notes and search the web.", "tool_calls": []}
    return {"text": f"Let me use {call['name']}.", "tool_calls": [call]}


# -- the loop ------------------------------------------------------------------------------------


class Agent:
    def __init__(self, probe: Probe, tools: Tools, *, who: str = "agent", model: str = "offline-small", effort: str = "low") -> None:
        self.probe = probe
        self.tools = tools
        self.who = who
        self.model = model
        self.effort = effort
        self.skills: set[str] = set()

    def turn(self, question: str) -> str:
        p = self.probe
        with p.scope("turn"):
            question = p.hold("prompt", name="user", value=question, editable=True, type_hint=str)
            say(f"{self.who} user: {question}")
            messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
            answer = ""
            for _ in range(6):
                with p.scope("step"):
                    request = {"model": self.model, "effort": self.effort, "messages": messages}
                    request = p.hold("model_request", name=self.model, value=request, editable=True, schema=REQUEST_SCHEMA)
                    model, effort = request["model"], request["effort"]
                    response = offline_model(model, effort, messages, self.tools.names())
                    response = p.hold("model_response", name=model, value=response, editable=True, schema=RESPONSE_SCHEMA)
                    text, calls = response["text"], response.get("tool_calls") or []
                    say(f"{self.who} model {model} (effort {effort}): {text}")
                    if not calls:
                        answer = text
                        break
                    messages.append({"role": "assistant", "content": text, "tool_calls": calls})
                    for call in calls:
                        messages.append({"role": "tool", "content": self.call_tool(call)})
            p.hold("turn_end", name="turn", value={"answer": answer})
            say(f"{self.who} answer: {answer}")
            return answer

    def call_tool(self, call: dict[str, Any]) -> str:
        p = self.probe
        name = str(call["name"])
        with p.scope("tool"):
            if name not in self.skills:
                self.skills.add(name)
                p.observe("skill_loaded", name, {"instructions": f"How to use {name}."})
            try:
                args = p.hold("tool_call", name=name, value=call.get("args", {}), editable=True, type_hint=dict)
            except stepd.Skipped:
                say(f"{self.who} tool {name} skipped")
                result = "(the tool call was skipped)"
            else:
                say(f"{self.who} tool {name} {json.dumps(args, sort_keys=True)}")
                try:
                    # A point that exists only when the tool raises (caught_msg = its message).
                    with p.on_exception("tool_error", name=name) as failed:
                        result = self.tools.run(name, args, p)
                    if failed.suppressed:
                        result = str(failed.value) if failed.value is not None else "(the error was skipped)"
                except Exception as err:
                    result = f"error: {err}"
            result = p.hold("tool_result", name=name, value=result, editable=True, type_hint=str)
            say(f"{self.who} result {name}: {result}")
            return str(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("question", nargs="+", help="the question; several run as several turns")
    parser.add_argument("--name", default="agent-loop", help="the probe's name (session name)")
    parser.add_argument("--label", action="append", default=[], metavar="K=V", help="a label for both probes")
    parser.add_argument("--model", default="offline-small", choices=MODELS)
    args = parser.parse_args(argv)
    labels = dict(item.split("=", 1) for item in args.label)

    probes = [stepd.probe.connect(name=args.name, labels={**labels, "agent": "main"})]
    with tempfile.TemporaryDirectory(prefix="agent-loop-") as sandbox:
        root = Path(sandbox)
        (root / "notes.txt").write_text("The launch code is 0000.\n")

        def sub_agent(task: str) -> str:
            # The sub-agent connects its own probe (a session labelled agent=sub) when first needed.
            if len(probes) == 1:
                probes.append(stepd.probe.connect(name=f"{args.name}-sub", labels={**labels, "agent": "sub"}))
            return Agent(probes[1], Tools(root, None), who="sub-agent").turn(task)

        agent = Agent(probes[0], Tools(root, sub_agent), model=args.model)
        try:
            for question in args.question:
                agent.turn(question)
        except stepd.Stopped as stop:
            say(f"agent stopped at {stop.kind} {stop.name}")
            return 3
        finally:
            for probe in probes:
                probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
