"""Reading an exec stream's lines with the kubernetes client's own WSClient.

The frames come from a socket pair, as they come from the API server: the receiver of a network
probe prints its result and exits, and its stdout frame, its channel-3 Status and the WebSocket
close are all waiting when the client next reads. The library's ``readline_stdout`` returns
``""`` then (it checks ``is_open()`` before its buffer); that lost the probe's result in CI
("no transfer result … sender exit 0").
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from kubernetes.stream.ws_client import STDOUT_CHANNEL, WSClient
from websocket import ABNF

from raychaos.targets.kubernetes.streams import LineReader


class _Frame:
    def __init__(self, data: bytes) -> None:
        self.data = data


class _Sock:
    """What WSClient.update() needs of a websocket: a pollable fd and frames to hand out."""

    def __init__(self) -> None:
        self.sock, self._peer = socket.socketpair()
        self.connected = True
        self._frames: list[tuple[int, _Frame]] = []
        self._lock = threading.Lock()

    def push(self, *frames: tuple[int, bytes]) -> None:
        with self._lock:
            self._frames += [(op, _Frame(data)) for op, data in frames]
            self._peer.send(b"x" * len(frames))  # one readable byte per frame

    def recv_data_frame(self, _control: bool) -> tuple[int, _Frame]:
        with self._lock:
            self.sock.recv(1)
            return self._frames.pop(0)

    def close(self, **_: Any) -> None:
        self.sock.close()
        self._peer.close()


def _client(sock: _Sock) -> WSClient:
    ws = WSClient.__new__(WSClient)  # its __init__ dials; the rest of it is the library's
    ws.sock, ws.binary, ws.newline, ws.subprotocol = sock, False, "\n", "v4.channel.k8s.io"
    ws._connected, ws._channels, ws._closed_channels = True, {}, set()
    ws._all = type("_Ignored", (), {"write": lambda self, _d: None})()
    ws._returncode = None
    return ws


def _stdout(text: str) -> tuple[int, bytes]:
    return ABNF.OPCODE_BINARY, bytes([STDOUT_CHANNEL]) + text.encode()


def _exit_and_close() -> list[tuple[int, bytes]]:
    return [(ABNF.OPCODE_BINARY, b'\x03{"status":"Success"}'), (ABNF.OPCODE_CLOSE, b"")]


def test_a_last_line_that_arrives_with_the_close_is_read() -> None:
    sock = _Sock()
    sock.push(_stdout("READY\n"))
    ws = _client(sock)
    reader = LineReader(ws)
    assert reader.readline(timeout=2) == "READY"
    sock.push(_stdout('{"rate_bps": 8.0}\n'), *_exit_and_close())
    assert reader.readline(timeout=2) == '{"rate_bps": 8.0}'
    assert not ws.is_open()
    assert reader.readline(timeout=2) == ""  # nothing more, at once
    sock.close()


def test_the_same_frames_defeat_the_librarys_readline() -> None:
    """The condition the reader exists for: if the library ever reads its buffer first, this
    fails and LineReader can go."""
    sock = _Sock()
    ws = _client(sock)
    sock.push(_stdout('{"rate_bps": 8.0}\n'), *_exit_and_close())
    assert ws.readline_stdout(timeout=2) == ""
    assert ws.read_channel(STDOUT_CHANNEL) == '{"rate_bps": 8.0}\n'  # it was there all along
    sock.close()


def test_lines_split_across_frames_and_many_lines_in_one_frame() -> None:
    sock = _Sock()
    ws = _client(sock)
    reader = LineReader(ws)
    sock.push(_stdout("a\nb"), _stdout("c\nd\n"), *_exit_and_close())
    assert [reader.readline(timeout=2) for _ in range(4)] == ["a", "bc", "d", ""]
    sock.close()


def test_an_unterminated_rest_is_returned_once_the_stream_closes() -> None:
    sock = _Sock()
    ws = _client(sock)
    reader = LineReader(ws)
    sock.push(_stdout("partial"), *_exit_and_close())
    assert reader.readline(timeout=2) == "partial"
    sock.close()


def test_a_line_that_arrives_later_is_waited_for_and_silence_times_out() -> None:
    sock = _Sock()
    ws = _client(sock)
    reader = LineReader(ws)
    timer = threading.Timer(0.3, sock.push, [_stdout("late\n")])
    timer.start()
    assert reader.readline(timeout=10) == "late"
    assert reader.readline(timeout=0.2) == ""  # open and silent: gives up at its timeout
    assert ws.is_open()
    timer.join()
    sock.close()
