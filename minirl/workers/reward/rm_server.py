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
`{"port": ..., "pid": ...}` as its first stdout line when it is ready. With `--parent-pid` it exits
on its own within 0.2 s of that process dying (even by `kill -9`), so it never outlives its run.
minirl simplifications: one replica, no router, no batching across requests (each request is one
forward pass over its texts), no sleep/wake (verl frees the GPU memory of a colocated model).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"


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


def make_handler(rm: RewardModel):
    """The request handler class for `rm` (GET /health, POST /classify; JSON in and out)."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # http.server calls do_<METHOD>
            if self.path == "/health":
                self._reply(200, {"status": "ok", "model": rm.path, "requests": rm.requests})
            else:
                self._reply(404, {"error": f"no endpoint GET {self.path}; try GET /health or POST /classify"})

        def do_POST(self):
            if self.path != "/classify":
                self._reply(404, {"error": f"no endpoint POST {self.path}; try POST /classify"})
                return
            try:
                payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                texts = payload["input"]
                texts = [texts] if isinstance(texts, str) else list(texts)
                if not texts or not all(isinstance(t, str) for t in texts):
                    raise ValueError("'input' must be a string or a non-empty list of strings")
            except (ValueError, KeyError, TypeError) as e:
                self._reply(400, {"error": f"bad request: {type(e).__name__}: {e}; send "
                                           '{"model": ..., "input": "<text>"}'})
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
    """One thread per request; a deep accept queue, so a whole batch of requests at once is not refused."""

    daemon_threads = True
    request_queue_size = 1024  # http.server's default is 5: a burst of connections beyond it is reset


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
    server = Server((HOST, args.port), make_handler(rm))
    print(json.dumps({"port": server.server_address[1], "pid": os.getpid()}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
