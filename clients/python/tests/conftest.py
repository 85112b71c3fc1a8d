"""Fixtures: the real stepd binary, started per test module, and a TCP proxy
that can cut connections."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import stepd

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT = 30.0


def stepd_bin() -> Path:
    path = Path(os.environ.get("STEPD_BIN") or REPO / "target" / "debug" / "stepd")
    if not path.exists() and "STEPD_BIN" not in os.environ:
        subprocess.run(["cargo", "build", "-p", "stepd", "--bin", "stepd"], cwd=REPO, check=True)
    if not path.exists():
        pytest.fail(f"stepd binary not found at {path} (set STEPD_BIN)")
    return path


class Daemon:
    """One running stepd process."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        unix_socket: bool = True,
        env: dict[str, str] | None = None,
        listen: str = "127.0.0.1:0",
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        argv = [str(stepd_bin()), "--listen", listen, "--data-dir", str(data_dir), *args]
        if not unix_socket:
            argv.append("--no-unix-socket")
        self.stderr = open(data_dir / "stepd.log", "wb")
        # debugpy is in the interpreter running the tests.
        env = {**os.environ, "STEPD_PYTHON": os.environ.get("STEPD_PYTHON", sys.executable), **(env or {})}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL, env=env)
        line = self._ready_line()
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        self.tcp = fields["tcp"]
        self.unix = fields.get("unix", "")
        #: The plaintext health-only address (--health-listen), if any.
        self.health = fields.get("health", "")

    def _ready_line(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    self.kill()
                    pytest.fail(f"stepd printed no ready line within {READY_TIMEOUT} s: {self.log()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.proc.wait(timeout=10)
                    pytest.fail(f"stepd exited with {self.proc.returncode} before it was ready: {self.log()}")
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        assert line.startswith("stepd ready "), line
        return line

    def log(self) -> str:
        return (self.data_dir / "stepd.log").read_text(errors="replace")[-4000:]

    def client(self, **kwargs: object) -> stepd.Client:
        return stepd.Client(self.tcp, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                with stepd.Client(self.tcp, timeout=5) as client:
                    client.shutdown()
                self.proc.wait(timeout=15)
            except Exception:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.kill()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.stderr.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("stepd"))
    yield d
    d.stop()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[stepd.Client]:
    with daemon.client(client_name="pytest") as c:
        yield c


class Proxy:
    """A loopback TCP proxy in front of the daemon. `cut()` closes every open
    connection and stops accepting; `restore()` listens again on the same port."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self.accepted = 0
        self._listener: socket.socket | None = None
        self.port = 0
        self.restore()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                downstream, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self.accepted += 1
                self._conns += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        if self._listener is not None:
            # shutdown wakes the accepting thread, so the port is free at once.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.cut()


@pytest.fixture
def proxy(daemon: Daemon) -> Iterator[Proxy]:
    p = Proxy(daemon.tcp)
    yield p
    p.close()
