"""The reward model: a server process on localhost, started and stopped by the run, and its client.

verl: `RewardModelManager` (`verl/experimental/reward_loop/reward_model.py:27`) launches the reward
model's inference replicas (vLLM/SGLang) and a router in front of them, and hands the router's
address to every `RewardLoopWorker`, which posts one request per sample (`_post_request`,
`verl/experimental/reward_loop/reward_loop.py:157`: up to 16 tries, exponential backoff, no retry
on a 4xx). minirl does the same on one machine:

- `RewardModelManager` starts `python -m minirl.workers.reward.rm_server` (one process, bound to
  127.0.0.1 on a port the OS picks), waits until it prints its port, and stops it in `shutdown`.
  It cannot outlive the run: `shutdown` runs from `PPOTrainer.close`, at interpreter exit and when
  the manager is garbage-collected, and the server itself exits when its parent process dies.
- `post_request` is the client: JSON over HTTP with a per-request timeout (`reward.timeout`) and
  `MAX_RETRIES` tries with backoff on connection errors, timeouts and 5xx answers (a 4xx is the
  request's fault: no retry). It is synchronous; the reward loop runs it in a daemon thread. It sends
  the server's token (`Authorization: Bearer ...`, which the server requires, see `rm_server`): the
  manager registers each server's token under its address, so a custom reward function that is given
  `reward_router_address` can call `post_request(reward_router_address, "classify", ...)` as is.
- `rm_input_text` is what the model reads: the chat (`raw_prompt` + the response as the assistant's
  turn) through the reward model's chat template, as `RewardLoopWorker._preprocess_reward_inputs`
  (`verl/experimental/reward_loop/reward_loop.py:197`) builds it. `minirl train-rm` trains on the same text.

minirl simplifications: one replica and no router; no sleep/wake (`wake_up`/`sleep` are no-ops:
verl releases a colocated model's GPU memory between steps, minirl's CPU server keeps its model).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref

__all__ = ["MAX_RETRIES", "RewardModelManager", "RewardModelServerError", "post_request", "register_token",
           "rm_input_text"]

_TOKENS: dict[str, str] = {}
"""`host:port` -> the token of the reward-model server there (filled by `RewardModelManager`)."""

MAX_RETRIES = 5
"""Tries per request (verl: 16, with backoff up to 30 s; minirl's server is local, so a few short tries)."""
STARTUP_TIMEOUT_S = 180.0
"""How long the server may take to load its model and print its port."""


class RewardModelServerError(RuntimeError):
    """The reward-model server did not start, or is gone; the message has its last stderr line."""


def rm_input_text(tokenizer, raw_prompt, response: str) -> str:
    """The chat `raw_prompt + [assistant: response]` in the reward model's template (not tokenized).

    Leading BOS text is removed, as verl does (the server's tokenizer adds special tokens itself).
    """
    chat = list(raw_prompt) + [{"role": "assistant", "content": response}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    bos = getattr(tokenizer, "bos_token", None)
    return text[len(bos):] if bos and text.startswith(bos) else text


def register_token(address: str, token: str | None) -> None:
    """Remember the token of the reward-model server at `address` in this process (an agent-loop worker process
    gets it from the controller, whose `RewardModelManager` started the server), so `post_request` sends it."""
    if address and token:
        _TOKENS[str(address)] = str(token)


def post_request(address: str, endpoint: str, payload: dict, timeout: float, max_retries: int = MAX_RETRIES,
                 token: str | None = None) -> dict:
    """POST `payload` as JSON to `http://{address}/{endpoint}`; the decoded JSON answer.

    `token`: the server's token (default: the one registered for `address` by the `RewardModelManager`
    that started it). Retries (backoff 0.1 s, 0.2 s, ... up to 2 s) on refused connections, timeouts and
    5xx answers; raises `urllib.error.HTTPError` at once on a 4xx and the last error after `max_retries` tries.
    """
    url = f"http://{address}/{endpoint.lstrip('/')}"
    data = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    token = token or _TOKENS.get(address)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    last: Exception | None = None
    for attempt in range(max_retries):
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if 400 <= e.code < 500:
                raise
            last = e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            last = e
        if attempt < max_retries - 1:
            time.sleep(min(0.1 * 2**attempt, 2.0))
    raise last  # type: ignore[misc]


def _check_classifier(path: str) -> None:
    """Refuse, before starting anything, a directory that is not a sequence classifier (e.g. the policy)."""
    key = "reward.reward_model.model_path"
    try:
        with open(os.path.join(path, "config.json")) as f:
            architectures = json.load(f).get("architectures") or []
    except (OSError, ValueError) as e:
        raise RewardModelServerError(f"{key}={path}: cannot read its config.json ({type(e).__name__}: {e}). Fix: give "
                                     "the directory `minirl train-rm` wrote.") from None
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise RewardModelServerError(f"{key}={path} holds {architectures or 'no architectures'}, not a sequence "
                                     "classifier: its score head would be random. Fix: give the directory `minirl "
                                     "train-rm` wrote (an AutoModelForSequenceClassification).")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


class RewardModelManager:
    """Starts the reward-model server for `reward.reward_model` and knows its address.

    Args:
        config: the `reward.reward_model` section (`model_path` is read).
    """

    def __init__(self, config):
        self.config = config
        self.model_path = os.path.abspath(os.path.expanduser(str(config.model_path)))
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.token: str | None = None
        """The server's token: requests carry it as `Authorization: Bearer <token>`."""
        _check_classifier(self.model_path)
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the server's stderr, for as long as it runs)
        self._start()

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "minirl.workers.reward.rm_server", "--model-path", self.model_path,
               "--parent-pid", str(os.getpid())]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=env, text=True)
        self._finalizer = weakref.finalize(self, _stop, self.process)
        atexit.register(self._finalizer)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                line = self.process.stdout.readline()
                break
        try:
            ready = json.loads(line)
            self.port, self.token = int(ready["port"]), str(ready["token"])
        except (ValueError, KeyError, TypeError):
            self.shutdown()
            raise RewardModelServerError(f"the reward model server for reward.reward_model.model_path="
                                         f"{self.model_path} did not start: {self.last_error() or 'no output'}. "
                                         "Fix: give the directory `minirl train-rm` wrote (an "
                                         "AutoModelForSequenceClassification with its tokenizer).") from None
        _TOKENS[self.get_router_address()] = self.token

    def get_router_address(self) -> str:
        """`127.0.0.1:<port>` (verl: the router's address, `RewardModelManager.get_router_address`)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process's id (None once stopped)."""
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.process is not None and self.process.poll() is None

    def last_error(self) -> str:
        """The last line the server wrote to stderr (why it failed), or ''."""
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def wake_up(self) -> None:
        """verl: wakes a colocated model's replicas (weights back on the GPU). minirl's server stays loaded."""

    def sleep(self) -> None:
        """verl: frees a colocated model's GPU memory. A no-op here."""

    def shutdown(self) -> None:
        """Stop the server (terminate, then kill after 5 s). Safe to call twice."""
        if self.process is not None:
            self._finalizer()
            atexit.unregister(self._finalizer)
            self.process = None
            _TOKENS.pop(self.get_router_address(), None)
