"""AgentLoop: how one prompt becomes `rollout.n` sessions, and each finished session a stored trajectory.

Mirrors `verl/experimental/agent_loop/` (`AgentLoopOutput`, `AgentLoopBase`, `SingleTurnAgentLoop`,
`AgentLoopWorker`, `AgentLoopManager`, `ToolAgentLoop`) and the V1 trainer's TransferQueue writer
`verl/trainer/ppo/v1/agent_loop_tq.py` (`AgentLoopWorkerTQ`, `AgentLoopManagerTQ`), at the pinned commit.
The clients a session awaits live with the rollout (`minirl.workers.rollout.llm_server`); the worker processes
(`actor_rollout_ref.rollout.agent.placement`) in `minirl.agent_loop.worker_process`.
"""

from minirl.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    get_agent_loop_class,
    new_uids,
    register,
)
from minirl.agent_loop.agent_loop_tq import (
    AgentLoopManagerTQ,
    AgentLoopWorkerTQ,
    BackgroundGeneration,
    LocalAgentLoopManagerTQ,
)
from minirl.agent_loop.multi_turn_stats import multi_turn_metrics, summarize_sessions
from minirl.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from minirl.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop

__all__ = ["AgentData", "AgentLoopBase", "AgentLoopManager", "AgentLoopManagerTQ", "AgentLoopMetrics",
           "AgentLoopOutput", "AgentLoopWorker", "AgentLoopWorkerTQ", "AgentState", "BackgroundGeneration",
           "LocalAgentLoopManagerTQ",
           "SingleTurnAgentLoop", "ToolAgentLoop", "get_agent_loop_class", "multi_turn_metrics", "new_uids",
           "register", "summarize_sessions"]
