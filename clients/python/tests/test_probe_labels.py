"""Labels from the pod's environment, and a breakpoint that pauses one
request of one user in one pod, against a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from google.protobuf import json_format

import stepd
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd.probe import _labels


def test_the_downward_api_names_fill_pod_namespace_node_and_app() -> None:
    env = {"POD_NAME": "web-1", "POD_NAMESPACE": "shop", "NODE_NAME": "n7", "OTEL_SERVICE_NAME": "orders"}
    assert _labels.from_environment(env) == {"pod": "web-1", "namespace": "shop", "node": "n7", "app": "orders"}
    # STEPD_LABEL_* wins over the conventional names; blank values count as unset.
    env |= {"STEPD_LABEL_POD": "canary-0", "APP_NAME": "  "}
    assert _labels.from_environment(env)["pod"] == "canary-0"
    assert _labels.from_environment(env)["app"] == "orders"
    assert _labels.from_environment({}) == {}


def test_in_a_pod_without_the_downward_api_hostname_and_the_namespace_file_fill_in(tmp_path: Path) -> None:
    ns = tmp_path / "namespace"
    ns.write_text("payments\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "api-7d9f-x2"}
    assert _labels.from_environment(env, str(ns)) == {"pod": "api-7d9f-x2", "namespace": "payments"}
    # Outside a pod HOSTNAME is a machine's name, not a pod's.
    assert _labels.from_environment({"HOSTNAME": "laptop"}, str(ns)) == {}


def test_explicit_labels_win_and_the_environment_can_be_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "web-1")
    assert _labels.merged({"pod": "mine", "agent": "a"}, True) == {"pod": "mine", "agent": "a"}
    assert _labels.merged({"agent": "a"}, True) == {"pod": "web-1", "agent": "a"}
    assert _labels.merged({"agent": "a"}, False) == {"agent": "a"}


WEB = """
import sys
import stepd.probe

addr, run = sys.argv[1], sys.argv[2]
probe = stepd.probe.connect(name="web", labels={"run": run}, addr=addr)
assert probe.wait_connected(20), "connected"
for user in ("bob", "alice"):
    order = probe.hold("request", name="GET /orders", value={"user": user, "total": 10}, editable=True)
    print(user, order["total"], flush=True)
probe.close()
"""


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def web(daemon: Daemon, script: Path, run: str, pod: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAME": pod, "POD_NAMESPACE": "shop"}
    return subprocess.Popen(
        [sys.executable, str(script), daemon.tcp, run],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_one_request_of_one_user_in_one_pod(daemon: Daemon, client: stepd.Client, watch: Watcher, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:12]
    script = tmp_path / "web.py"
    script.write_text(WEB)
    client.add_breakpoint(
        probe_kind="request",
        probe_name="GET /orders",
        label_selector=f"pod=web-1,namespace=shop,run={run}",
        condition='value.user == "alice"',
    )
    other = web(daemon, script, run, "web-2")
    out, err = other.communicate(timeout=DEADLINE)
    assert other.returncode == 0, err
    # web-2 passed both points without holding: the selector names web-1.
    assert out.split("\n")[:2] == ["bob 10", "alice 10"]
    target = web(daemon, script, run, "web-1")
    try:
        pause = watch.pause(run, name="GET /orders")
        assert dict(pause.point.labels) == {"pod": "web-1", "namespace": "shop", "run": run}
        assert json_format.MessageToDict(pause.point.payload) == {"user": "alice", "total": 10}
        client.send_debug_input(pause.key, "inject", value={"user": "alice", "total": 0})
        out, err = target.communicate(timeout=DEADLINE)
        assert target.returncode == 0, err
        assert out.split("\n")[:2] == ["bob 10", "alice 0"]
    finally:
        if target.poll() is None:
            target.kill()
            target.communicate()
    held = watch.find(lambda e: e.HasField("stopped") and e.stopped.pause.point.labels.get("run") == run)
    assert [e.stopped.pause.point.labels["pod"] for e in held] == ["web-1"]
