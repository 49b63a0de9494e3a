"""The server side of WebSocket (RFC 6455) and Kubernetes' channel protocol over it, for
``pods/exec`` and ``pods/portforward``.

Why hand-written: the API server is a standard-library HTTP server; the protocol needs only the
handshake, framing (client frames are masked, ours are not) and close — and it lets the
replies match the golden exactly (101, an empty stdout message, the Status on channel 3, close
1000). ``v5.channel.k8s.io`` is chosen when offered (as kube-apiserver 1.36 does), else
``v4.channel.k8s.io``; in both, each message is one channel byte then data.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import subprocess
import threading
from typing import Any

__all__ = ["WebSocket", "accept", "run_exec", "run_portforward", "exit_status"]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")
OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def accept(handler: Any, protocols: tuple[str, ...] = PROTOCOLS) -> WebSocket | None:
    """Answer the upgrade on a BaseHTTPRequestHandler; None (and a 400) if it is not one."""
    key = handler.headers.get("Sec-WebSocket-Key")
    offered = [p.strip() for p in (handler.headers.get("Sec-WebSocket-Protocol") or "").split(",")
               if p.strip()]
    chosen = next((p for p in protocols if p in offered), None)
    if not key:
        return None
    digest = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", digest)
    if chosen:
        handler.send_header("Sec-WebSocket-Protocol", chosen)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    return WebSocket(handler.connection, handler.rfile, chosen or "")


class WebSocket:
    def __init__(self, sock: socket.socket, rfile: Any, protocol: str):
        self.sock, self.rfile, self.protocol = sock, rfile, protocol
        self.wlock = threading.Lock()
        self.closed = False

    def send(self, data: bytes, opcode: int = OP_BIN) -> None:
        n = len(data)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 1 << 16:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        with self.wlock:
            if not self.closed:
                self.sock.sendall(head + data)

    def send_channel(self, channel: int, data: bytes) -> None:
        self.send(bytes([channel]) + data)

    def close(self, code: int = 1000) -> None:
        try:
            self.send(struct.pack(">H", code), OP_CLOSE)
        except OSError:
            pass
        self.closed = True

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.rfile.read(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def recv(self) -> tuple[int, bytes]:
        """One whole message (fragments joined); (OP_CLOSE, b"") at EOF."""
        message, first_op = b"", None
        try:
            while True:
                b1, b2 = self._read(2)
                op, fin = b1 & 0x0F, b1 & 0x80
                n = b2 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._read(8))[0]
                mask = self._read(4) if b2 & 0x80 else b""
                data = self._read(n)
                if mask:
                    data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
                if op == OP_PING:
                    self.send(data, OP_PONG)
                    continue
                if op in (OP_CLOSE, OP_PONG):
                    if op == OP_CLOSE:
                        return OP_CLOSE, data
                    continue
                first_op = op if first_op is None else first_op
                message += data
                if fin:
                    return first_op, message
        except (EOFError, OSError, ValueError):
            return OP_CLOSE, b""


def exit_status(code: int | None, error: str | None = None) -> bytes:
    if error is not None:
        body: dict[str, Any] = {"metadata": {}, "status": "Failure",
                                "message": f"Internal error occurred: {error}",
                                "reason": "InternalError",
                                "details": {"causes": [{"message": error}]}, "code": 500}
    elif code == 0:
        body = {"metadata": {}, "status": "Success"}
    else:
        body = {"metadata": {}, "status": "Failure",
                "message": f"command terminated with non-zero exit code: error executing "
                           f"command [...], exit code {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
    return json.dumps(body, separators=(",", ":")).encode()


def run_exec(ws: WebSocket, proc: subprocess.Popen | None, error: str | None = None) -> None:
    """Pump a process's stdout/stderr to channels 1/2 and channel 0 to its stdin; then the exit
    Status on channel 3 and a close. With ``error`` (no container to run in): the golden's
    empty stdout message, a 500 Status on channel 3, close."""
    if proc is None:
        ws.send_channel(1, b"")
        ws.send_channel(3, exit_status(None, error or "container not found"))
        ws.close()
        return

    def pump(stream: Any, channel: int) -> None:
        for chunk in iter(lambda: stream.read1(65536) if hasattr(stream, "read1")
                          else stream.read(65536), b""):
            ws.send_channel(channel, chunk)

    def feed() -> None:
        while True:
            op, data = ws.recv()
            if op == OP_CLOSE:
                break
            if not data or proc.stdin is None:
                continue
            if data[0] == 0:
                try:
                    proc.stdin.write(data[1:])
                    proc.stdin.flush()
                except OSError:
                    pass
            elif data[0] == 255 and data[1:2] == b"\x00":  # v5: stdin closed
                proc.stdin.close()

    threads = [threading.Thread(target=pump, args=(s, ch), daemon=True)
               for s, ch in ((proc.stdout, 1), (proc.stderr, 2)) if s is not None]
    for t in threads:
        t.start()
    threading.Thread(target=feed, daemon=True).start()
    for t in threads:
        t.join()
    code = proc.wait()
    if code < 0:  # killed by a signal: the kubelet reports 128 + the signal, as a shell does
        code = 128 - code
    try:
        ws.send_channel(3, exit_status(code))
        ws.close()
    except OSError:
        pass


def run_portforward(ws: WebSocket, targets: list[tuple[str, int]]) -> None:
    """One TCP connection per requested port; channel 2i carries its data, 2i+1 its errors;
    the first message on each channel is the port number (little-endian uint16)."""
    conns: list[socket.socket | None] = []
    for i, (host, port) in enumerate(targets):
        ws.send_channel(2 * i, struct.pack("<H", port))
        ws.send_channel(2 * i + 1, struct.pack("<H", port))
        try:
            conns.append(socket.create_connection((host, port), timeout=5))
        except OSError as exc:
            ws.send_channel(2 * i + 1, f"error forwarding port {port} to pod: {exc}".encode())
            conns.append(None)

    def upstream(i: int, conn: socket.socket) -> None:
        conn.settimeout(None)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                ws.send_channel(2 * i, data)
        except OSError:
            pass
        ws.close()

    for i, c in enumerate(conns):
        if c is not None:
            threading.Thread(target=upstream, args=(i, c), daemon=True).start()
    try:
        while not ws.closed:
            op, data = ws.recv()
            if op == OP_CLOSE:
                break
            if data and data[0] % 2 == 0 and data[0] // 2 < len(conns):
                c = conns[data[0] // 2]
                if c is not None and len(data) > 1:
                    c.sendall(data[1:])
    except OSError:
        pass
    finally:
        for c in conns:
            if c is not None:
                c.close()
        ws.close()
