# How stepd starts debugpy's adapter: `python3 -c <this file>` instead of
# `python3 -m debugpy.adapter`, with one change to the adapter process.
#
# pydevd, inside the debuggee, writes each DAP message to the adapter as two
# TCP sends (header, then body) on a socket without TCP_NODELAY. Nagle's
# algorithm holds the body until the header is acknowledged, and Linux delays
# that acknowledgement by 40 ms, so every request to debugpy took ~44 ms.
# Asking the kernel for an immediate acknowledgement before each read on the
# adapter's side (TCP_QUICKACK does not stick, hence every read) releases the
# body at once. Only the adapter process is touched, never the debuggee.
import runpy
import socket

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)
_TCP_FAMILIES = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))


def _acknowledging(read):
    def wrapper(self, *args, **kwargs):
        if self.family in _TCP_FAMILIES:
            try:
                self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:
                pass
        return read(self, *args, **kwargs)

    return wrapper


if _QUICKACK is not None:
    socket.socket.recv = _acknowledging(socket.socket.recv)
    socket.socket.recv_into = _acknowledging(socket.socket.recv_into)

runpy.run_module("debugpy.adapter", run_name="__main__", alter_sys=True)
