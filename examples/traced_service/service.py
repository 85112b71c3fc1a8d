"""A small HTTP tool service, traced with OpenTelemetry and debuggable with stepd.

    python examples/traced_service/service.py [--port 8080]

``POST /tools/NAME`` with a JSON object runs the tool NAME (``transfer``,
``echo``) inside a server span of its own, which continues the caller's
``traceparent``. Each run passes the probe point ``tool_call`` named after the
tool, holding when a stepd breakpoint is armed there, then ``tool_result``
with what the tool returned; because they hold inside the request's span,
stepd's pauses are spans of this request's trace. The
answer is JSON with the tool's result and the request's ``trace_id``; SKIP
answers 409.

The daemon is ``$STEPD_ADDR`` (default 127.0.0.1:7701); spans go over OTLP
gRPC to ``$OTEL_EXPORTER_OTLP_ENDPOINT`` when it is set (nowhere otherwise).
The service's name is ``$OTEL_SERVICE_NAME``, default ``traced-service``.
README.md beside this file walks through holding a request and finding the
pause in Jaeger.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import stepd
import stepd.probe


def transfer(args: dict[str, Any]) -> dict[str, Any]:
    amount = float(args.get("amount", 0))
    if amount <= 0:
        raise ValueError("amount must be positive")
    return {"transferred": amount, "to": str(args.get("to", ""))}


def echo(args: dict[str, Any]) -> dict[str, Any]:
    return dict(args)


TOOLS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"transfer": transfer, "echo": echo}


def tracer_provider() -> TracerProvider:
    service = os.environ.get("OTEL_SERVICE_NAME", "traced-service")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class Server(ThreadingHTTPServer):
    # A burst of concurrent requests waits in the listen queue instead of
    # overflowing the default backlog of 5 (each overflow a 1 s SYN retry).
    request_queue_size = 128
    daemon_threads = True


class Handler(BaseHTTPRequestHandler):
    tracer: trace.Tracer
    probe: stepd.probe.Probe

    def do_POST(self) -> None:
        name = self.path.removeprefix("/tools/")
        tool = TOOLS.get(name)
        if not self.path.startswith("/tools/") or tool is None:
            self.answer(404, {"error": f"no tool {name!r}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            args = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.answer(400, {"error": "the body is not JSON"})
            return
        # The request continues the caller's trace and baggage (W3C traceparent
        # and baggage headers): made current, as OpenTelemetry's HTTP
        # middleware does, so a breakpoint scoped to a request's baggage sees it.
        token = context.attach(propagate.extract(dict(self.headers)))
        try:
            self.run(name, tool, args)
        finally:
            context.detach(token)

    def run(self, name: str, tool: Callable[[dict[str, Any]], dict[str, Any]], args: dict[str, Any]) -> None:
        with self.tracer.start_as_current_span(f"POST /tools/{name}", kind=trace.SpanKind.SERVER) as span:
            trace_id = f"{span.get_span_context().trace_id:032x}"
            try:
                # Holds here when a breakpoint is armed: the pause is a child of this span.
                args = self.probe.hold("tool_call", name=name, value=args, editable=True, type_hint=dict)
                result = tool(args)
                # Where a step (NEXT) from the tool call lands, in this request.
                result = self.probe.hold("tool_result", name=name, value=result, editable=True, type_hint=dict)
            except stepd.Skipped:
                self.answer(409, {"skipped": name, "trace_id": trace_id})
                return
            except (ValueError, TypeError) as err:
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(err)))
                self.answer(422, {"error": str(err), "trace_id": trace_id})
                return
            self.answer(200, {"result": result, "trace_id": trace_id})

    def answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.address_string()} {format % args}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args()

    provider = tracer_provider()
    probe = stepd.probe.connect(name="traced-service", labels={"app": "traced-service"})
    # The first requests can hold too; a daemon that is not there yet is no reason not to serve.
    probe.wait_connected(5)
    Handler.tracer = provider.get_tracer("traced-service")
    Handler.probe = probe
    server = Server((options.host, options.port), Handler)
    # Stop on SIGTERM as on ^C: the last spans are flushed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on http://{options.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        probe.close()
        provider.shutdown()


if __name__ == "__main__":
    main()
