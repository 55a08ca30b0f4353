"""One tool call with a deadline: create, execute, release, within `multi_turn.tool_timeout` seconds.

A tool is user code, and user code may never return: an `await` on something that never comes, or a
blocking call (`time.sleep`, `requests.get` without a timeout) inside `execute`. Awaited on the agent
loop's event loop, as verl awaits it (`ToolAgentLoop._call_tool`,
`verl/experimental/agent_loop/tool_agent_loop.py:431`, with no timeout), a blocking call stops every
session of the worker and the run hangs without a word. So `call_tool`:

- runs a user tool's whole call (create, execute, release) in a daemon thread with its own event
  loop, and waits for it at most `timeout` seconds; a call still running then raises `ToolTimeout`
  (the agent loop turns it into an observation and a counted `timeout` failure) and its thread is
  abandoned (`minirl.utils.py_functional.in_daemon_thread`, the thread a user reward call gets too);
- runs a tool whose class sets `minirl_inline = True` (minirl's calculator, which returns at once and
  bounds its own time) directly on the agent loop's event loop: no thread per call, and an `await`
  that never ends still times out.

`execute` may also be a plain `def` (it then runs in the thread like any blocking call).
Knows nothing of the agent loop (DESIGN.md): the caller passes what `execute` receives.
"""

from __future__ import annotations

import asyncio
import inspect

from minirl.utils.py_functional import in_daemon_thread

__all__ = ["ToolTimeout", "call_tool", "runs_inline"]


class ToolTimeout(TimeoutError):
    """A tool call ran longer than `multi_turn.tool_timeout`; the message says how long it was given."""


def runs_inline(tool) -> bool:
    """Whether `tool` runs on the caller's event loop (`minirl_inline = True` on its class)."""
    return bool(getattr(type(tool), "minirl_inline", False))


async def _maybe_await(value):
    return await value if inspect.isawaitable(value) else value


async def _lifecycle(tool, parameters: dict, create_kwargs: dict, execute_kwargs: dict):
    instance_id = None
    try:
        instance_id, _ = await _maybe_await(tool.create(create_kwargs=create_kwargs))
        return await _maybe_await(tool.execute(instance_id, parameters, **execute_kwargs))
    finally:
        if instance_id is not None:
            await _maybe_await(tool.release(instance_id))


async def call_tool(tool, parameters: dict, timeout: float, create_kwargs: dict | None = None,
                    **execute_kwargs) -> tuple:
    """`(response, step_reward, metrics)` of one call of `tool`, or `ToolTimeout` after `timeout` seconds.

    Exceptions of the tool's own code propagate (the agent loop contains them).
    """
    create_kwargs = dict(create_kwargs or {})
    if runs_inline(tool):
        work = asyncio.ensure_future(_lifecycle(tool, parameters, create_kwargs, execute_kwargs))
    else:
        work = asyncio.ensure_future(in_daemon_thread(
            lambda: asyncio.run(_lifecycle(tool, parameters, create_kwargs, execute_kwargs)),
            name=f"minirl-tool-{type(tool).__name__}"))
    done, _ = await asyncio.wait({work}, timeout=timeout)
    if not done:
        work.cancel()
        where = "on the event loop" if runs_inline(tool) else "its thread is abandoned"
        raise ToolTimeout(f"timed out after {timeout:g} s (multi_turn.tool_timeout; {where})")
    return work.result()
