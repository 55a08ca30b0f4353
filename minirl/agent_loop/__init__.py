"""AgentLoop: how `rollout.n` sessions per prompt become one padded training batch.

Mirrors `verl/experimental/agent_loop/` at the pinned commit: `AgentLoopOutput`, `AgentLoopBase`,
`SingleTurnAgentLoop`, `AgentLoopWorker`, `AgentLoopManager`.
"""

from minirl.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    LLMServerClient,
    get_agent_loop_class,
    register,
)
from minirl.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

__all__ = ["AgentLoopBase", "AgentLoopManager", "AgentLoopMetrics", "AgentLoopOutput", "AgentLoopWorker",
           "LLMServerClient", "SingleTurnAgentLoop", "get_agent_loop_class", "register"]
