"""A real HAProxy in front of a daemon: HTTP/2 without TLS on both sides,
as a load balancer in front of stepd runs it (Debian installs the binary in
/usr/sbin)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

READY_TIMEOUT = 30.0


def binary() -> str:
    sbin = Path("/usr/sbin/haproxy")
    if sbin.is_file():
        return str(sbin)
    found = shutil.which("haproxy")
    if found is None:
        raise RuntimeError("haproxy is not installed (scripts/tools installs it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Haproxy:
    """HAProxy forwarding a free loopback port to `backend` (host:port)."""

    def __init__(self, backend: str, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.addr = f"127.0.0.1:{port}"
        config = directory / "haproxy.cfg"
        config.write_text(
            "global\n  maxconn 200\n"
            "defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n"
            "  timeout server 60s\n  timeout tunnel 60s\n"
            f"frontend grpc\n  bind {self.addr} proto h2\n  default_backend stepd\n"
            f"backend stepd\n  server daemon {backend} proto h2\n"
        )
        self.log = open(directory / "haproxy.log", "wb")
        self.proc = subprocess.Popen(
            [binary(), "-db", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"haproxy did not listen on {self.addr}")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
