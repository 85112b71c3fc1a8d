"""Runs every `$ ` command of docs/grpcurl.md against a real stepd daemon.

The commands run in order in one bash shell (so a variable set by one command
is seen by the next, as when a reader types them), each with a deadline, with
127.0.0.1:7701 rewritten to the address of a daemon started for the run.

A command exits 0 unless an HTML comment placed before it in the page says
otherwise. The comment applies to the next `$ ` command:

    <!-- expect: exit=69 "Code: NotFound" !"snapshot" -->

`exit=N` is the exit status; each "text" must appear in the command's output
(stdout and stderr together), each !"text" must not.

Standard library only. Usage: grpcurl_doctest.py [--show] [markdown]
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOC_ADDR = "127.0.0.1:7701"
# The page's Unix socket (the default one), rewritten to the test daemon's.
DOC_SOCKET = "$HOME/.local/share/stepd/run/stepd.sock"
# The page has this many commands; finding fewer means the parser broke (or
# the page lost examples), which must not pass quietly.
MIN_COMMANDS = 28
COMMAND_DEADLINE = 60.0
READY_DEADLINE = 30.0
# Programs the page's commands use besides shell builtins.
TOOLS = ["grpcurl", "sed", "grep", "tr"]
MARKER = re.compile(r"<!--\s*expect:(.*?)-->", re.S)
SENTINEL = "__stepd_doc_done__"


@dataclass
class Command:
    line: int
    text: str
    exit: int = 0
    present: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)


def parse_marker(body: str, line: int) -> Command:
    cmd = Command(line=line, text="")
    rest = body
    m = re.search(r"\bexit=(\d+)", rest)
    if m:
        cmd.exit = int(m.group(1))
        rest = rest[: m.start()] + rest[m.end() :]
    for neg, text in re.findall(r'(!?)"((?:[^"\\]|\\.)*)"', rest):
        text = text.replace('\\"', '"')
        (cmd.absent if neg else cmd.present).append(text)
    leftover = re.sub(r'!?"((?:[^"\\]|\\.)*)"', "", rest).strip()
    if leftover:
        raise SystemExit(f"line {line}: cannot read expect marker: {body!r}")
    return cmd


def commands(markdown: str) -> list[Command]:
    """The `$ ` lines of ```console blocks, with the expectations of the
    marker before each."""
    found: list[Command] = []
    pending: Command | None = None
    in_console = in_other = False
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if stripped.startswith("```"):
            if in_console or in_other:
                in_console = in_other = False
            elif stripped == "```console":
                in_console = True
            else:
                in_other = True
            i += 1
            continue
        if in_console:
            if stripped.startswith("$ "):
                cmd = pending or Command(line=i + 1, text="")
                cmd.line, cmd.text = i + 1, stripped[2:]
                found.append(cmd)
                pending = None
        elif not in_other and "<!--" in raw:
            # A marker may span lines.
            chunk = raw
            j = i
            while "-->" not in chunk and j + 1 < len(lines):
                j += 1
                chunk += "\n" + lines[j]
            m = MARKER.search(chunk)
            if m:
                if pending is not None:
                    raise SystemExit(f"line {pending.line}: expect marker without a command after it")
                pending = parse_marker(m.group(1), i + 1)
            i = j
        i += 1
    if pending is not None:
        raise SystemExit(f"line {pending.line}: expect marker without a command after it")
    if in_console or in_other:
        raise SystemExit("unterminated code block")
    return found


def find_grpcurl() -> str:
    local = ROOT / ".tools" / "bin" / "grpcurl"
    if local.exists():
        return str(local)
    found = shutil.which("grpcurl")
    if not found:
        raise SystemExit("grpcurl not found (scripts/tools installs it into .tools/bin)")
    return found


def stepd_bin() -> Path:
    path = Path(os.environ.get("STEPD_BIN") or ROOT / "target" / "debug" / "stepd")
    if not path.exists() and "STEPD_BIN" not in os.environ:
        subprocess.run(["cargo", "build", "-p", "stepd", "--bin", "stepd"], cwd=ROOT, check=True)
    if not path.exists():
        raise SystemExit(f"stepd binary not found at {path} (set STEPD_BIN)")
    return path


class Daemon:
    def __init__(self, data_dir: Path, path_dirs: list[str]) -> None:
        self.log_path = data_dir / "stepd.log"
        self.log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPD_")}
        # The daemon finds the adapters the page launches on its PATH.
        env["PATH"] = os.pathsep.join([*path_dirs, env.get("PATH", "")])
        self.proc = subprocess.Popen(
            [str(stepd_bin()), "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        line = self._ready_line()
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        self.addr = fields["tcp"]
        self.socket = str(data_dir / "run" / "stepd.sock")

    def _ready_line(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_DEADLINE
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    self.stop()
                    raise SystemExit(f"stepd printed no ready line within {READY_DEADLINE:.0f} s\n{self.tail()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.stop()
                    raise SystemExit(f"stepd exited before it was ready\n{self.tail()}")
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        if not line.startswith("stepd ready "):
            self.stop()
            raise SystemExit(f"unexpected first line from stepd: {line!r}")
        return line

    def tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                return None
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


class Shell:
    """One bash process; each command's output goes to a file, and bash
    reports the exit status on its stdout after a sentinel."""

    def __init__(self, cwd: Path, path_dirs: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPD_")}
        env["PATH"] = os.pathsep.join([*path_dirs, env.get("PATH", "")])
        env["LC_ALL"] = "C"
        self.cwd = cwd
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=cwd, env=env, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""

    def run(self, n: int, command: str, deadline: float) -> tuple[int | None, str]:
        """Runs `command`; returns (exit status, output), or (None, output so
        far) when it did not finish within `deadline` seconds."""
        out = self.cwd / f"out.{n}"
        script = f"{{ {command}\n}} </dev/null >{shlex.quote(str(out))} 2>&1; printf '\\n{SENTINEL} %d\\n' $?\n"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        end = time.monotonic() + deadline
        pattern = re.compile(rb"\n" + SENTINEL.encode() + rb" (\d+)\n")
        while True:
            m = pattern.search(self.buf)
            if m:
                self.buf = self.buf[m.end() :]
                return int(m.group(1)), out.read_text(errors="replace")
            remaining = end - time.monotonic()
            if remaining <= 0 or not self.sel.select(remaining):
                return None, out.read_text(errors="replace") if out.exists() else ""
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                return None, "(the shell exited)"
            self.buf += chunk

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.sel.close()


def main(argv: list[str]) -> int:
    show = "--show" in argv
    args = [a for a in argv if a != "--show"]
    page = Path(args[0]) if args else HERE / "grpcurl.md"
    cmds = commands(page.read_text())
    if len(cmds) < MIN_COMMANDS:
        print(f"FAIL: found {len(cmds)} commands in {page}, expected at least {MIN_COMMANDS}", file=sys.stderr)
        for c in cmds:
            print(f"  line {c.line}: {c.text}", file=sys.stderr)
        return 1
    if not any(c.exit != 0 for c in cmds):
        print(f"FAIL: no command in {page} is marked to fail; the expect markers were not read", file=sys.stderr)
        return 1

    grpcurl = find_grpcurl()
    path_dirs = [str(Path(grpcurl).parent)]
    # The adapters the page launches (debugpy) live in the tool venv.
    venv_bin = ROOT / ".tools" / "venv" / "bin"
    if venv_bin.is_dir():
        path_dirs.append(str(venv_bin))
    missing = [t for t in TOOLS if t != "grpcurl" and not shutil.which(t)]
    if missing:
        print(f"FAIL: the page's commands need {', '.join(missing)}", file=sys.stderr)
        return 1

    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="stepd-grpcurl-doc-") as tmp:
        data_dir = Path(tmp) / "data"
        work = Path(tmp) / "work"
        data_dir.mkdir()
        work.mkdir()
        daemon = Daemon(data_dir, path_dirs)
        shell = Shell(work, path_dirs)
        try:
            print(f"{len(cmds)} commands from {page.name}, daemon at {daemon.addr}")
            for n, cmd in enumerate(cmds, 1):
                text = cmd.text.replace(DOC_ADDR, daemon.addr).replace(DOC_SOCKET, daemon.socket)
                rc, output = shell.run(n, text, COMMAND_DEADLINE)
                problems = []
                if rc is None:
                    problems.append(f"did not finish within {COMMAND_DEADLINE:.0f} s")
                elif rc != cmd.exit:
                    problems.append(f"exit status {rc}, documented {cmd.exit}")
                problems += [f"output lacks {s!r}" for s in cmd.present if s not in output]
                problems += [f"output has {s!r}" for s in cmd.absent if s in output]
                if problems:
                    failed += 1
                    print(f"FAIL {n} (line {cmd.line}): {cmd.text}")
                    for p in problems:
                        print(f"     {p}")
                    print("     output:\n" + "\n".join("       | " + l for l in output.splitlines()))
                    if rc is None:
                        break
                else:
                    passed += 1
                    print(f"ok   {n} (line {cmd.line}, exit {rc}): {cmd.text[:110]}")
                    if show:
                        print("\n".join("       | " + l for l in output.splitlines()))
        finally:
            shell.close()
            status = daemon.stop()
            if status not in (0, None) and failed == 0:
                print(f"FAIL: stepd exited with status {status}\n{daemon.tail()}")
                failed += 1
    not_run = len(cmds) - passed - failed
    if not_run:
        print(f"{not_run} commands not run after a command hung")
        failed += not_run
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
