"""The reward-model server: one process that hosts a sequence classifier behind HTTP on 127.0.0.1.

    python -m minirl.workers.reward.rm_server --model-path DIR [--port 0] [--parent-pid PID]

verl serves a discriminative reward model with vLLM or SGLang replicas behind a router
(`RewardModelManager`, `verl/experimental/reward_loop/reward_model.py:27`) and posts one request per
sample to vLLM's pooling endpoint `/classify` (`RewardLoopWorker.compute_score_disrm`,
`verl/experimental/reward_loop/reward_loop.py:231`). minirl's server answers the same request with
the same response shape, so the client code reads like verl's:

    POST /classify  {"model": "<path>", "input": "<chat-templated prompt + response>" | [texts]}
    -> {"object": "list", "model": ..., "data": [{"index": 0, "label": 1, "probs": [p0, p1], "num_classes": 2}],
        "usage": {"prompt_tokens": n, "total_tokens": n}}
    GET /health     -> {"status": "ok", "model": ..., "requests": <classify requests served>}

The score verl takes is `data[-1]["probs"][-1]`: the probability of the last class ("correct" for
the models `minirl train-rm` builds). The model is an `AutoModelForSequenceClassification`, run on
CPU in float32 with one thread; requests are served by threads and the forward passes take turns.

It binds 127.0.0.1 only, on a free port the OS picks (`--port 0`), and prints
`{"port": ..., "pid": ..., "token": ...}` as its first stdout line when it is ready (the parent reads it
from a pipe; the token is made by the server, so it never shows in `ps`). With `--parent-pid` it exits
on its own within 0.2 s of that process dying (even by `kill -9`), so it never outlives its run.

Any local user, and any web page the user opens (DNS rebinding, a cross-origin form), can reach a
loopback port, so before it reads a request's body the server checks, in this order, and answers
with one JSON error and closes otherwise:

- `Host` is `127.0.0.1:<port>` or `localhost:<port>` (421): a rebound DNS name is refused;
- no `Origin` header (403): a browser page cannot post here, whatever its content type;
- `Authorization: Bearer <token>`, compared in constant time (401);
- POST bodies are `Content-Type: application/json` (415), with a `Content-Length` (411) that is a
  number (400) of at most `MAX_BODY_BYTES` (413): nothing is allocated for a larger one;
- at most `MAX_BATCH` texts per request (413) and `MAX_CONNECTIONS` connections at once (the rest are
  closed at once); every socket read times out after `READ_TIMEOUT_S`.

minirl simplifications: one replica, no router, no batching across requests (each request is one
forward pass over its texts), no sleep/wake (verl frees the GPU memory of a colocated model).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"
MAX_BODY_BYTES = 256 * 1024
"""The largest request body read (one chat-templated sample is a few KiB)."""
MAX_BATCH = 32
"""The most texts one request may ask to classify."""
MAX_CONNECTIONS = 64
"""Connections served at once; more are closed without a word."""
READ_TIMEOUT_S = 10.0
"""Every read of a request (line, headers, body) must finish within this many seconds."""


class RewardModel:
    """The classifier and its tokenizer; `classify(texts)` -> one probability list per text."""

    def __init__(self, model_path: str):
        import torch
        import transformers
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        torch.set_num_threads(1)
        self.torch = torch
        self.path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, dtype=torch.float32).eval()
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.lock = threading.Lock()
        self.requests = 0

    def classify(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """Softmax class probabilities of each text, and the number of tokens read."""
        inputs = encode(self.tokenizer, texts, self.max_length)
        with self.lock, self.torch.inference_mode():
            logits = self.model(**inputs).logits
            self.requests += 1
        return self.torch.softmax(logits.float(), dim=-1).tolist(), int(inputs["attention_mask"].sum())


def encode(tokenizer, texts: list[str], max_length: int) -> dict:
    """Texts -> left-padded `input_ids`, `attention_mask`, `position_ids` (what the classifier reads).

    Left padding puts each text's last token in the last column, which the classifier's head reads;
    positions count from each text's first real token, so a text scores the same alone or in a batch.
    `minirl train-rm` trains on exactly this encoding.
    """
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"][-max_length:] or [pad] for t in texts]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}


def make_handler(rm: RewardModel, token: str):
    """The request handler class for `rm` (GET /health, POST /classify; JSON in and out), guarded by `token`."""
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S  # socketserver sets it on the connection: no read waits forever

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self) -> bool:
            """Reply with the first guard that fails (see the module docstring); True if one did."""
            port = self.server.server_address[1]
            host = (self.headers.get("Host") or "").strip().lower()
            if host not in (f"127.0.0.1:{port}", f"localhost:{port}"):
                self._reply(421, {"error": f"Host must be 127.0.0.1:{port} or localhost:{port}"})
            elif self.headers.get("Origin") is not None:
                self._reply(403, {"error": "cross-origin requests are refused"})
            elif not hmac.compare_digest((self.headers.get("Authorization") or "").encode(), expected):
                self._reply(401, {"error": "missing or wrong token: send 'Authorization: Bearer <token>' (the "
                                           "token is in the server's ready line; post_request sends it)"})
            else:
                return False
            return True

        def _read_json(self):
            """The request's JSON body, or None after replying with why it cannot be read."""
            if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
                self._reply(415, {"error": "send Content-Type: application/json"})
                return None
            declared = self.headers.get("Content-Length")
            if declared is None:
                self._reply(411, {"error": "a Content-Length is required"})
                return None
            try:
                length = int(declared)
                if length < 0:
                    raise ValueError
            except ValueError:
                self._reply(400, {"error": f"Content-Length {declared[:40]!r} is not a byte count"})
                return None
            if length > MAX_BODY_BYTES:
                self._reply(413, {"error": f"the body may be at most {MAX_BODY_BYTES} bytes, not {length}"})
                return None
            body = self.rfile.read(length)
            if len(body) < length:
                self.close_connection = True  # the client stopped sending: nobody to answer
                return None
            try:
                return json.loads(body or b"{}")
            except ValueError as e:
                self._reply(400, {"error": f"bad request: the body is not JSON ({e})"})
                return None

        def do_GET(self):  # http.server calls do_<METHOD>
            if self._refuse():
                return
            if self.path == "/health":
                self._reply(200, {"status": "ok", "model": rm.path, "requests": rm.requests})
            else:
                self._reply(404, {"error": f"no endpoint GET {self.path}; try GET /health or POST /classify"})

        def do_POST(self):
            if self._refuse():
                return
            if self.path != "/classify":
                self._reply(404, {"error": f"no endpoint POST {self.path}; try POST /classify"})
                return
            payload = self._read_json()
            if payload is None:
                return
            try:
                texts = payload["input"]
                texts = [texts] if isinstance(texts, str) else list(texts)
                if not texts or not all(isinstance(t, str) for t in texts):
                    raise ValueError("'input' must be a string or a non-empty list of strings")
            except (ValueError, KeyError, TypeError) as e:
                self._reply(400, {"error": f"bad request: {type(e).__name__}: {e}; send "
                                           '{"model": ..., "input": "<text>"}'})
                return
            if len(texts) > MAX_BATCH:
                self._reply(413, {"error": f"at most {MAX_BATCH} texts per request, not {len(texts)}"})
                return
            try:
                probs, tokens = rm.classify(texts)
            except Exception as e:  # noqa: BLE001 (the client sees a 500 and retries)
                self._reply(500, {"error": f"{type(e).__name__}: {e}"})
                return
            data = [{"index": i, "label": max(range(len(p)), key=p.__getitem__), "probs": p, "num_classes": len(p)}
                    for i, p in enumerate(probs)]
            self._reply(200, {"object": "list", "model": payload.get("model", rm.path), "data": data,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        def log_message(self, format, *args):  # quiet: a line per request is noise
            pass

    return Handler


class Server(ThreadingHTTPServer):
    """One thread per connection, at most `MAX_CONNECTIONS` at once; a deep accept queue, so a whole batch of
    requests at once is not refused."""

    daemon_threads = True
    request_queue_size = 1024  # http.server's default is 5: a burst of connections beyond it is reset

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):  # a flood of connections: drop the newest
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address):  # a client that vanished mid-request: nothing to print
        pass


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(0.2)


def main(argv=None) -> int:
    """Load the model, bind 127.0.0.1, print the port, serve until terminated (or the parent dies)."""
    p = argparse.ArgumentParser(prog="python -m minirl.workers.reward.rm_server", description=__doc__.splitlines()[0])
    p.add_argument("--model-path", required=True, help="directory of an AutoModelForSequenceClassification")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one, printed on stdout)")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = p.parse_args(argv)
    if args.parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(args.parent_pid,), daemon=True).start()
    rm = RewardModel(args.model_path)
    token = secrets.token_hex(16)
    server = Server((HOST, args.port), make_handler(rm, token))
    print(json.dumps({"port": server.server_address[1], "pid": os.getpid(), "token": token}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
