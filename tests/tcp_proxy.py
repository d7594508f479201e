"""A loopback TCP proxy whose listener can be taken down and brought back, or whose connections
can be black-holed, to simulate outages."""

from __future__ import annotations

import contextlib
import socket
import threading


class OutageProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``; ``down()`` refuses and cuts connections, ``up()`` heals.

    ``black_hole()``: from then on every byte is swallowed, on the open connections too (they stay
    up, as through a dead route: the client sees nothing wrong but no answer), and new connections
    are accepted and never answered. ``heal()`` drops every connection (as TCP eventually would)
    and forwards again.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.address = f"127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._swallowing = False
        self.up()

    def black_hole(self) -> None:
        """Swallow every byte from now on; accept new connections and never answer them."""
        self._swallowing = True

    def heal(self) -> None:
        """Forward again, dropping the connections the black hole held."""
        self._swallowing = False
        self._cut()

    def close(self) -> None:
        """Stop listening and cut every connection."""
        self.down()

    def up(self) -> None:
        """Start accepting connections again on the same port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Close the listener (connections are refused) and cut every open connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self._cut()

    def _cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._swallowing:
                with self._lock:
                    self._conns.append(client)  # held open, never read, never answered
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._swallowing:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
