"""The rollout servers' RPC against a local stranger, and against a server that dies or hangs.

Any user of the machine can connect to a port on 127.0.0.1. Each test here plays that stranger against
a real `serve_rpc` server in its own process (a trivial handler, no model, so the tests take seconds)
and checks that nothing runs, nothing grows, nothing is printed, and the server goes on answering its
real client. Then the client's side: a server killed (-9) or stopped (SIGSTOP) fails every waiting
call with one `ServerLost` line within the configured timeout instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from minirl.workers.rollout import rpc
from minirl.workers.rollout.rpc import (
    MAX_FRAME_BYTES,
    TOKEN_BYTES,
    RPCClient,
    RPCError,
    ServerLost,
    new_token,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the server's memory")

SERVER = """
import asyncio, sys
from minirl.workers.rollout import rpc
rpc.AUTH_TIMEOUT_S = 1.0

async def handler(method, kwargs):
    if method == "echo":
        return kwargs
    if method == "nap":
        await asyncio.sleep(kwargs["s"])
        return "napped"
    raise AttributeError(f"no method {method!r}")

async def main():
    server = await rpc.serve_rpc(handler, sys.argv[1])
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class Server:
    """A `serve_rpc` process with an echo handler; its stderr is kept to check that it printed nothing."""

    def __init__(self, tmp_path):
        self.token = new_token()
        self.err = open(tmp_path / "server.err", "w+")  # noqa: SIM115
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, self.token], stdout=subprocess.PIPE,
                                        stderr=self.err, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        self.port = int(self.process.stdout.readline())

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()

    def call(self, method="echo", token=None, hung_after_s=10.0, **kwargs):
        async def go():
            client = RPCClient(rpc.LOOPBACK, self.port, token or self.token, name="test server",
                               hung_after_s=hung_after_s)
            await client.connect(timeout=10)
            try:
                return await client.call(method, **kwargs)
            finally:
                await client.close()

        return asyncio.run(go())

    def stop(self):
        with_signal = self.process.poll() is None
        if with_signal:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)
        self.err.close()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection((rpc.LOOPBACK, port), timeout=5)
    sock.settimeout(5)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server has closed the connection (EOF or reset) within 5 s, without answering."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class Trap:
    """Unpickling this creates a file: the proof that a server ran code it was sent."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_unauthenticated_pickle_runs_nothing(server, tmp_path):
    proof = tmp_path / "pwned"
    payload = pickle.dumps(Trap(proof))
    for data in (struct.pack(">Q", len(payload)) + payload, payload):  # framed as the old protocol, and raw
        with _connect(server.port) as sock:
            sock.sendall(data)
            assert _closed_by_server(sock)
    time.sleep(0.2)
    assert not proof.exists(), "the server unpickled a stranger's frame"
    assert server.call(x=1) == {"x": 1}  # the run goes on
    assert server.stderr() == ""  # closed quietly: no traceback in the run's output


def test_a_wrong_or_short_token_is_refused_and_the_client_says_so(server):
    for data in (b"0" * TOKEN_BYTES, server.token.encode()[:-1]):
        with _connect(server.port) as sock:
            sock.sendall(data)
            if len(data) < TOKEN_BYTES:
                sock.shutdown(socket.SHUT_WR)
            assert _closed_by_server(sock)
    with pytest.raises(RPCError, match=r"test server at 127\.0\.0\.1:\d+ did not accept the connection"):
        server.call(token="f" * TOKEN_BYTES)
    assert server.call(y=2) == {"y": 2}


def test_a_silent_connection_is_dropped(server):
    with _connect(server.port) as sock:
        t0 = time.monotonic()
        assert _closed_by_server(sock)  # the server's AUTH_TIMEOUT_S is 1 s in this test
        assert time.monotonic() - t0 < 4


def test_a_stream_of_junk_does_not_grow_the_server(server):
    before = server.rss_mib()
    junk = os.urandom(2**20)
    sent = 0
    for _ in range(8):  # connections that try to push 64 MiB of junk each
        with _connect(server.port) as sock:
            try:
                for _ in range(64):
                    sock.sendall(junk)
                    sent += len(junk)
            except (ConnectionResetError, BrokenPipeError, TimeoutError):
                pass
    time.sleep(0.3)
    assert server.rss_mib() - before < 16, (before, server.rss_mib(), sent)
    assert sent < 8 * 64 * 2**20  # every connection was cut short
    assert server.call(z=3) == {"z": 3} and server.stderr() == ""


def test_an_oversized_frame_is_refused_before_it_is_read(server):
    before = server.rss_mib()
    with _connect(server.port) as sock:  # a stranger announcing 1 TiB: its 8 bytes are a wrong token
        sock.sendall(struct.pack(">Q", 2**40) + b"x" * 64)
        assert _closed_by_server(sock)
    with _connect(server.port) as sock:  # the real token, then a frame over the limit
        sock.sendall(server.token.encode() + struct.pack(">Q", MAX_FRAME_BYTES + 1) + b"x" * 2**20)
        assert _closed_by_server(sock)
    assert server.rss_mib() - before < 16
    assert server.call(w=4) == {"w": 4} and server.stderr() == ""


def test_a_killed_server_fails_the_waiting_call_with_one_line(server):
    async def go():
        client = RPCClient(rpc.LOOPBACK, server.port, server.token, name="test server", hung_after_s=30)
        await client.connect(timeout=10)
        waiting = asyncio.ensure_future(client.call("nap", s=60))
        await asyncio.sleep(0.2)
        os.kill(server.process.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(ServerLost) as lost:
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ServerLost):  # and every later call, at once
            await client.call("echo")
        await client.close()
        return lost.value, time.monotonic() - t0

    error, waited = asyncio.run(go())
    assert waited < 5 and "test server closed the connection" in str(error) and "while it ran nap" in str(error)
    assert "\n" not in str(error)


def test_a_stopped_server_is_named_hung_after_the_timeout(server):
    async def go():
        client = RPCClient(rpc.LOOPBACK, server.port, server.token, name="test server", hung_after_s=2)
        await client.connect(timeout=10)
        waiting = asyncio.ensure_future(client.call("nap", s=60))
        await asyncio.sleep(0.2)
        os.kill(server.process.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(ServerLost) as lost:
            await asyncio.wait_for(waiting, 15)
        await client.close()
        return lost.value, time.monotonic() - t0

    error, waited = asyncio.run(go())
    assert 1.5 < waited < 8, waited
    assert "test server answered nothing for" in str(error) and "SIGSTOP" in str(error)
    assert "rollout.server.timeout=2" in str(error) and "while it ran nap" in str(error)


def test_a_control_call_without_an_answer_loses_the_server(server, monkeypatch):
    monkeypatch.setattr(rpc, "CONTROL_METHODS", frozenset({"nap"}))  # a control call that never answers in time

    async def go():
        client = RPCClient(rpc.LOOPBACK, server.port, server.token, name="test server", hung_after_s=1)
        await client.connect(timeout=10)
        try:
            with pytest.raises(ServerLost, match=r"test server did not answer nap within 1 s \(hung, or stopped"):
                await client.call("nap", s=30)
            with pytest.raises(ServerLost):
                await client.call("echo", v=5)
        finally:
            await client.close()

    asyncio.run(go())


def test_the_lost_line_names_pid_exit_and_last_log_lines(capfd):
    from minirl.workers.rollout.server_log import LogTail, lost_server_message

    script = ("import os, sys\nfor i in range(50): print(f'line {i}', file=sys.stderr)\n"
              "print('loading 10%\\rloading 90%', file=sys.stderr)\n"
              "print('RuntimeError: out of memory', file=sys.stderr, flush=True)\nos.kill(os.getpid(), 9)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    tail = LogTail(process.stderr)
    process.wait(timeout=30)
    tail._thread.join(5)
    line = lost_server_message("rollout server 3", process, "127.0.0.1:1234", "closed the connection (EOFError)",
                               "generate (2 calls)", tail)
    assert line.startswith(f"rollout server 3 (pid {process.pid}, 127.0.0.1:1234) was killed by SIGKILL (exit code "
                           "-9) while the controller waited for generate (2 calls); its last log lines: 'line 49' | "
                           "'loading 90%' | 'RuntimeError: out of memory'. The run stops here"), line
    assert "\n" not in line and "Fix:" in line
    assert "line 0\n" in capfd.readouterr().err  # everything was passed through to our stderr as it came


# ------------------------------------------------------------------------------ the reward-model server

RM_SERVER = """
import json, os, sys
from minirl.workers.reward import rm_server
rm_server.READ_TIMEOUT_S = 1.0

class FixedModel:  # the real server and handler; a stand-in classifier (no model to load)
    path, requests = "fixed", 0

    def classify(self, texts):
        self.requests += 1
        return [[0.25, 0.75] for _ in texts], sum(map(len, texts))

server = rm_server.Server(("127.0.0.1", 0), rm_server.make_handler(FixedModel(), sys.argv[1]))
print(server.server_address[1], flush=True)
server.serve_forever(poll_interval=0.1)
"""


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    """One real reward-model server process for every case (each case checks that it still answers)."""
    token = new_token()
    err = open(tmp_path_factory.mktemp("rm") / "rm.err", "w+")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-c", RM_SERVER, token], stdout=subprocess.PIPE, stderr=err, text=True,
                               env={**os.environ, "PYTHONPATH": os.getcwd()})
    port = int(process.stdout.readline())
    yield {"port": port, "token": token, "process": process, "err": err}
    process.kill()
    process.wait(timeout=10)
    err.close()


def _http(port: int, request: bytes, wait_s: float = 5) -> tuple[int | None, bytes]:
    """Send raw HTTP; the status code and body of the answer (None if the server closed without one).

    The headers go first; the body only if the server has not answered them within 0.5 s (a server that
    refuses a request by its headers must not need its body, and a reset must not hide its answer).
    """
    import select

    head, sep, body = request.partition(b"\r\n\r\n")
    with _connect(port) as sock:
        sock.settimeout(wait_s)
        sock.sendall(head + sep)
        if body and not select.select([sock], [], [], 0.5)[0]:
            sock.sendall(body)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    if not data:
        return None, b""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _post(port, token=None, host=None, body=b'{"input": "hi"}', ctype="application/json", length=None, extra=b""):
    headers = [b"POST /classify HTTP/1.1", b"Host: " + (host or f"127.0.0.1:{port}").encode()]
    if ctype is not None:
        headers.append(b"Content-Type: " + ctype.encode())
    if token is not None:
        headers.append(b"Authorization: Bearer " + token.encode())
    if length != "none":
        headers.append(b"Content-Length: " + str(len(body) if length is None else length).encode())
    return b"\r\n".join(headers) + b"\r\n" + extra + b"\r\n" + body


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


RM_CASES = {  # name -> (request(port, token), expected status)
    "no token": (lambda port, token: _post(port), 401),
    "wrong token": (lambda port, token: _post(port, "0" * TOKEN_BYTES), 401),
    "a rebound Host (DNS rebinding)": (lambda port, token: _post(port, token, host=f"attacker.example:{port}"), 421),
    "Host with another port": (lambda port, token: _post(port, token, host=f"127.0.0.1:{port + 1}"), 421),
    "a browser's cross-origin POST": (lambda port, token: _post(port, token, extra=b"Origin: http://evil.example\r\n"),
                                      403),
    "text/plain body (a simple cross-origin form)": (lambda port, token: _post(port, token, ctype="text/plain"), 415),
    "no Content-Length": (lambda port, token: _post(port, token, length="none"), 411),
    "Content-Length -1": (lambda port, token: _post(port, token, length=-1), 400),
    "Content-Length 2**40": (lambda port, token: _post(port, token, length=2**40), 413),
    "1 MiB body": (lambda port, token: _post(port, token, body=json.dumps({"input": "x" * 2**20}).encode()), 413),
    "33 texts in one request": (lambda port, token: _post(port, token, body=json.dumps({"input": ["a"] * 33}).encode()),
                                413),
    "a body that is not JSON": (lambda port, token: _post(port, token, body=b"{not json"), 400),
    "GET /health without the token": (lambda port, token: f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
                                      .encode(), 401),
}


@pytest.mark.parametrize("name", list(RM_CASES))
def test_the_reward_model_server_refuses_a_stranger(name, rm):
    make, status = RM_CASES[name]
    before = _rss_mib(rm["process"].pid)
    t0 = time.monotonic()
    got, body = _http(rm["port"], make(rm["port"], rm["token"]))
    assert got == status, (got, body)
    assert time.monotonic() - t0 < 4  # answered at once: nothing waits for a body that never comes
    assert "error" in json.loads(body)
    assert _rss_mib(rm["process"].pid) - before < 16
    from minirl.workers.reward import post_request

    ok = post_request(f"127.0.0.1:{rm['port']}", "classify", {"input": ["a", "b"]}, 5, token=rm["token"])
    assert [d["probs"] for d in ok["data"]] == [[0.25, 0.75]] * 2  # the run goes on
    rm["err"].seek(0)
    assert rm["err"].read() == ""


def test_the_reward_model_server_times_out_a_slow_client_and_survives_a_flood(rm):
    from minirl.workers.reward import post_request

    port, token = rm["port"], rm["token"]
    t0 = time.monotonic()
    status, _ = _http(port, _post(port, token, body=b"", length=100), wait_s=8)  # declares 100 bytes, sends none
    assert status is None and time.monotonic() - t0 < 4  # READ_TIMEOUT_S is 1 s here
    idle = [_connect(port) for _ in range(100)]  # more than MAX_CONNECTIONS, all silent
    try:
        answer = post_request(f"127.0.0.1:{port}", "classify", {"input": "hi"}, 5, token=token)  # retries if refused
        assert answer["data"][0]["probs"] == [0.25, 0.75]
    finally:
        for sock in idle:
            sock.close()
