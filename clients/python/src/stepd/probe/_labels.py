"""Labels a probe takes from where it runs: the pod's environment.

A breakpoint can then select one pod (``pod=web-1``) without the program
naming itself. Explicit labels always win over these.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Label → the environment variables that fill it, first set wins. The
#: ``POD_*`` / ``NODE_NAME`` names are the ones the Kubernetes downward API
#: is conventionally mapped to; ``STEPD_LABEL_*`` overrides any of them.
_SOURCES: dict[str, tuple[str, ...]] = {
    "pod": ("STEPD_LABEL_POD", "POD_NAME"),
    "namespace": ("STEPD_LABEL_NAMESPACE", "POD_NAMESPACE"),
    "node": ("STEPD_LABEL_NODE", "NODE_NAME"),
    "app": ("STEPD_LABEL_APP", "APP_NAME", "OTEL_SERVICE_NAME"),
}

#: Where Kubernetes mounts the pod's namespace for its service account.
_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def from_environment(environ: Mapping[str, str] | None = None, namespace_file: str = _NAMESPACE_FILE) -> dict[str, str]:
    """The labels the environment gives: see :data:`_SOURCES`.

    In a pod (``KUBERNETES_SERVICE_HOST`` set) without the downward API, the
    pod falls back to ``HOSTNAME`` (a pod's hostname is its name) and the
    namespace to the service account's namespace file.
    """
    env = os.environ if environ is None else environ
    labels: dict[str, str] = {}
    for label, names in _SOURCES.items():
        value = next((env[n].strip() for n in names if env.get(n, "").strip()), "")
        if value:
            labels[label] = value
    if env.get("KUBERNETES_SERVICE_HOST"):
        if "pod" not in labels and env.get("HOSTNAME", "").strip():
            labels["pod"] = env["HOSTNAME"].strip()
        if "namespace" not in labels:
            try:
                with open(namespace_file, encoding="utf-8") as f:
                    namespace = f.read().strip()
            except OSError:
                namespace = ""
            if namespace:
                labels["namespace"] = namespace
    return labels


def merged(explicit: Mapping[str, str] | None, environment: bool) -> dict[str, str]:
    """The probe's labels: the environment's (when wanted), then the explicit ones over them."""
    labels = from_environment() if environment else {}
    labels.update(explicit or {})
    return labels
