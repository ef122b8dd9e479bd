"""``pods/exec`` over a WebSocket, as kubectl 1.37 speaks it (``v5.channel.k8s.io``, also ``v4``).

The request is a GET with ``Upgrade: websocket`` and the command in repeated ``command`` parameters
(``container``, ``stdin``, ``stdout``, ``stderr``, ``tty`` beside it). After the 101 every binary message is
one channel byte then data: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize (client to server), and in v5 255
"close this channel" (k8s.io/apimachinery ``pkg/util/remotecommand/constants.go``). The server writes the
command's output on 1 and 2, then one metav1 Status on 3 (``Success``; ``NonZeroExitCode`` with an
``ExitCode`` cause, whose message kubectl turns into its own exit code; or ``InternalError`` when the
runtime could not start the command), then closes. kubectl falls back to SPDY only when the upgrade fails
(a non-101 answer), so errors before the upgrade are plain Status answers (kubectl prints "unable to upgrade
connection: ..."); that SPDY fallback (also kubectl with ``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``) is
served too, with ``v4.channel.k8s.io`` and one SPDY stream per channel.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from gpuplan.sim.api import spdy, websocket
from gpuplan.sim.api.protocol import Connection, HttpError, Request, Upgrade

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
SPDY_PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CHUNK = 32 * 1024


class ExecOutcome(Protocol):
    """What the command did: output, exit code, or ``error`` when the runtime could not start it."""

    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def error(self) -> str | None: ...


def status_of(outcome: ExecOutcome, command: list[str]) -> dict[str, Any]:
    """The error channel's Status, as the kubelet's streaming server writes it (remotecommand ServeExec)."""
    if outcome.error is not None:
        message = f"Internal error occurred: error executing command in container: {outcome.error}"
        return {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": f"error executing command in container: {outcome.error}"}]},
            "code": 500,
        }
    if outcome.exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {outcome.exit_code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(outcome.exit_code)}]},
    }


def command_of(request: Request) -> list[str]:
    command = list(request.query.get("command") or [])
    if not command:
        raise HttpError(400, "BadRequest", "you must specify at least 1 command")
    return command


def upgrade(request: Request, run: Callable[[list[str]], ExecOutcome]) -> Upgrade:
    """The 101 answer whose connection runs ``run(command)`` and streams its result."""
    if request.header("Upgrade").lower() == "spdy/3.1":
        return spdy_upgrade(request, command_of(request), run)
    if not websocket.is_upgrade(request):
        raise HttpError(400, "BadRequest", "Upgrade request required")
    command = command_of(request)
    _, headers = websocket.handshake(request, PROTOCOLS)
    want_stdout = request.param("stdout", "true") != "false"
    want_stderr = request.param("stderr", "true") != "false" and not request.flag("tty")

    def serve(conn: Connection) -> None:
        ws = websocket.WebSocket(conn)
        outcome = run(command)
        if want_stdout:
            _send(ws, STDOUT, outcome.stdout.encode())
        if want_stderr:
            _send(ws, STDERR, outcome.stderr.encode())
        elif outcome.stderr:
            _send(ws, STDOUT, outcome.stderr.encode())  # a TTY has one output stream
        ws.send(bytes([ERROR]) + json.dumps(status_of(outcome, command)).encode())
        ws.close()
        ws.drain()

    return Upgrade(headers, serve)


def _flags(request: Request) -> dict[str, bool]:
    tty = request.flag("tty")
    return {
        "stdin": request.flag("stdin"),
        "stdout": request.param("stdout", "true") != "false",
        "stderr": request.param("stderr", "true") != "false" and not tty,
        "resize": tty,
    }


def spdy_upgrade(request: Request, command: list[str], run: Callable[[list[str]], ExecOutcome]) -> Upgrade:
    """kubectl's fallback (``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``): SPDY/3.1 with ``v4.channel.k8s.io``,
    one stream per channel (``streamType`` error, stdin, stdout, stderr, resize; kubelet
    ``cri/streaming/remotecommand/httpstream.go``). The command runs once every stream asked for is open."""
    offered = [p.strip() for p in request.header("X-Stream-Protocol-Version").split(",") if p.strip()]
    if SPDY_PROTOCOL not in offered:
        raise HttpError(
            403,
            "Forbidden",
            f"unable to upgrade: unable to negotiate protocol: client supports {offered}, server supports "
            f"[{SPDY_PROTOCOL}]",
        )
    expected = {"error"} | {name for name, wanted in _flags(request).items() if wanted}
    headers = [
        ("Connection", "Upgrade"),
        ("Upgrade", "SPDY/3.1"),
        ("X-Stream-Protocol-Version", SPDY_PROTOCOL),
    ]

    def serve(conn: Connection) -> None:
        codec, streams, done = spdy.Codec(), dict[str, int](), False

        def send(*frames: spdy.Frame) -> None:
            conn.write(b"".join(codec.encode(frame) for frame in frames))

        while chunk := conn.read(65536):
            for frame in codec.feed(chunk):
                if isinstance(frame, spdy.SynStream):
                    kind = (frame.headers.get("streamtype") or [""])[0]
                    streams[kind] = frame.stream_id
                    send(spdy.SynReply(frame.stream_id))
                elif isinstance(frame, spdy.Ping):
                    send(frame)
                elif isinstance(frame, spdy.GoAway):
                    return
            if not done and expected <= set(streams):
                done = True
                send(*_spdy_result(run(command), command, streams))

    return Upgrade(headers, serve)


def _spdy_result(outcome: ExecOutcome, command: list[str], streams: dict[str, int]) -> list[spdy.Frame]:
    frames: list[spdy.Frame] = []
    outputs = {"stdout": outcome.stdout, "stderr": outcome.stderr}
    if "stderr" not in streams:  # a TTY has one output stream
        outputs["stdout"] += outcome.stderr
    for kind, text in outputs.items():
        if kind in streams:
            data = text.encode()
            stream = streams[kind]
            frames += [spdy.Data(stream, data[i : i + CHUNK]) for i in range(0, len(data), CHUNK)]
            frames.append(spdy.Data(stream, b"", spdy.FLAG_FIN))
    status = json.dumps(status_of(outcome, command)).encode()
    return [*frames, spdy.Data(streams["error"], status), spdy.Data(streams["error"], b"", spdy.FLAG_FIN)]


def _send(ws: websocket.WebSocket, channel: int, data: bytes) -> None:
    for start in range(0, len(data), CHUNK):
        ws.send(bytes([channel]) + data[start : start + CHUNK])
