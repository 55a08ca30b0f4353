"""The teacher's inference servers: one `LLMServerManager` per teacher, on 127.0.0.1.

verl: `TeacherModelManager` (`verl/experimental/teacher_loop/teacher_model.py:37`) launches a teacher's
rollout replicas (vLLM or SGLang servers, `is_teacher_model=True`) on a resource pool of its own
(`distillation.n_gpus_per_node * distillation.nnodes` GPUs), and `MultiTeacherModelManager`
(`verl/experimental/teacher_loop/teacher_model.py:165`) keeps one per teacher, keyed by the teacher's
`key`, and hands out one `LLMServerClient` each (`get_client`, `:207`). The V1 trainer builds it in
`PPOTrainer._setup` (`verl/trainer/ppo/v1/trainer_base.py:229`) and passes the clients to the agent loop
(`get_teacher_client`, `:375`).

minirl reuses its rollout-server machinery unchanged: a teacher is an `LLMServerManager`
(`minirl.workers.rollout.llm_server`) whose replicas are `minirl.workers.rollout.server` processes
started with the teacher's model and its `inference` settings; each binds 127.0.0.1 and accepts only a
connection that first sends the run's random token (`minirl.workers.rollout.rpc`). The teacher
answers the ordinary `generate` call; `SamplingParams.prompt_logprobs` makes it score the sequence
it is sent (`minirl.teacher_loop.teacher_manager`).

How a teacher's settings become a rollout server's (verl: `DistillationTeacherModelConfig.
validate_and_prepare_for_distillation`, `verl/workers/config/distillation.py:172`): the student's
`actor_rollout_ref.rollout` section, overridden by the teacher's `inference` keys, with
`prompt_length` = student prompt + response length and `response_length` = 1 (the teacher reads the
whole student sequence and emits one token nobody uses).

minirl simplifications: the servers are processes on this machine (verl: Ray actors placed on the
teacher's resource pool); `nnodes * n_gpus_per_node` counts server *processes* on CPU; only the `hf`
backend can score prompts (verl: vLLM or SGLang), so `inference.name` must be `hf`.
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from minirl.config.derived import generation_nice
from minirl.utils.config import cfg_get

__all__ = ["EMBEDDED_TEACHER", "MultiTeacherModelManager", "TeacherModelManager", "resolve_teacher_models",
           "teacher_rollout_config"]

EMBEDDED_TEACHER = "minirl://tiny-qwen2-teacher"
"""The teacher used when `model_path` is null: the embedded Qwen2 trained longer by SFT (to 0.9 held-out), built once."""


def _world(inference) -> int:
    """Devices per replica: tensor * data * pipeline parallel (verl: `per_replica_world_size`)."""
    return (int(cfg_get(inference, "tensor_model_parallel_size", 1)) * int(cfg_get(inference, "data_parallel_size", 1))
            * int(cfg_get(inference, "pipeline_model_parallel_size", 1)))


def resolve_teacher_models(distillation) -> dict[str, dict]:
    """`teacher_models` keyed by each teacher's routing `key`, with `num_replicas` filled in.

    verl: `DistillationConfig._resolve_teacher_models` (`verl/workers/config/distillation.py:289`): one
    entry (`teacher_model`) is the single teacher, named `default`, owning the whole pool
    (`num_replicas = pool // per_replica_world_size`); with more entries `teacher_model` is dropped and
    every other entry needs its own `key` and `num_replicas`.
    """
    models = OmegaConf.to_container(distillation.teacher_models, resolve=True) if OmegaConf.is_config(
        distillation.teacher_models) else dict(distillation.teacher_models)
    pool = int(distillation.n_gpus_per_node) * int(distillation.nnodes)
    if len(models) == 1:
        (teacher,) = models.values()
        teacher = dict(teacher, key="default")
        teacher["num_replicas"] = pool // _world(teacher.get("inference"))
        return {"default": teacher}
    models.pop("teacher_model", None)
    return {str(t["key"]): dict(t) for t in models.values()}


def teacher_rollout_config(config, teacher: dict) -> dict:
    """The rollout-server settings of one teacher: the student's rollout keys, the teacher's `inference` on top."""
    rollout = OmegaConf.to_container(config.actor_rollout_ref.rollout, resolve=True)
    inference = dict(teacher.get("inference") or {})
    rollout.update({k: v for k, v in inference.items() if v is not None})
    rollout["prompt_length"] = int(inference.get("prompt_length") or rollout["prompt_length"]) + int(
        inference.get("response_length") or rollout["response_length"])
    rollout["response_length"] = 1
    rollout["nnodes"] = 1
    rollout["n_gpus_per_node"] = int(teacher["num_replicas"]) * _world(inference)
    rollout["calculate_log_probs"] = False
    rollout["nice"] = generation_nice(config)  # the teacher's servers run as niced as the student's rollout
    return rollout


class TeacherModelManager:
    """One teacher: its server processes (an `LLMServerManager`) and its load balancer.

    Args:
        config: the whole trainer config.
        teacher: one resolved entry of `distillation.teacher_models` (`resolve_teacher_models`).
        wait: block until the servers are up (False: they start in the background; `get_client` waits).
    """

    def __init__(self, config, teacher: dict, wait: bool = True) -> None:
        from minirl.models import resolve_model_path
        from minirl.workers.rollout.llm_server import LLMServerManager

        self.key = str(teacher["key"])
        self.teacher = teacher
        path = teacher.get("model_path") or EMBEDDED_TEACHER
        if not teacher.get("model_path"):
            print(f"[minirl] distillation: no teacher model_path, using the embedded teacher {EMBEDDED_TEACHER}",
                  file=sys.stderr, flush=True)
        self.model_path = resolve_model_path(path)
        _check_same_vocabulary(config, self.model_path, self.key)
        server_config = OmegaConf.create({"actor_rollout_ref": {"rollout": teacher_rollout_config(config, teacher)},
                                          "trainer": {"device": str(config.trainer.device)}})
        self.server_manager = LLMServerManager.create(server_config, self.model_path, wait=wait)

    def get_client(self):
        """The teacher's `LLMServerClient` (waits for the servers)."""
        return self.server_manager.get_client()

    @property
    def server_addresses(self) -> list[str]:
        return self.server_manager.get_addresses()

    def shutdown(self) -> None:
        self.server_manager.shutdown()


class MultiTeacherModelManager:
    """Every teacher of `distillation.teacher_models`, keyed by its routing `key`.

    verl: `MultiTeacherModelManager` (`verl/experimental/teacher_loop/teacher_model.py:165`); the teachers
    start in parallel (their processes come up while the trainer builds the actor).
    """

    def __init__(self, config, wait: bool = False) -> None:
        self.config = config
        self.teacher_models = resolve_teacher_models(config.distillation)
        self.teacher_model_managers: dict[str, TeacherModelManager] = {}
        try:
            for key, teacher in self.teacher_models.items():
                self.teacher_model_managers[key] = TeacherModelManager(config, teacher, wait=wait)
        except BaseException:
            self.shutdown()
            raise

    def get_client(self) -> dict:
        """`{key: LLMServerClient}` for the agent loop (verl: `MultiTeacherModelManager.get_client`)."""
        return {key: m.get_client() for key, m in self.teacher_model_managers.items()}

    @property
    def model_paths(self) -> dict[str, str]:
        return {key: m.model_path for key, m in self.teacher_model_managers.items()}

    def shutdown(self) -> None:
        for manager in self.teacher_model_managers.values():
            manager.shutdown()


def _check_same_vocabulary(config, teacher_path: str, key: str) -> None:
    """The teacher scores the student's token ids: both must use one vocabulary (verl's docs ask for it)."""
    from minirl.config import ConfigError
    from minirl.models import load_model_config, resolve_model_path

    student = str(config.actor_rollout_ref.model.path)
    s_vocab = load_model_config(resolve_model_path(student)).vocab_size
    t_vocab = load_model_config(teacher_path).vocab_size
    if s_vocab != t_vocab:
        raise ConfigError(f"distillation teacher {key!r} ({teacher_path}) has a vocabulary of {t_vocab} tokens but the "
                         f"student ({student}) has {s_vocab}: the teacher scores the student's token ids, so both "
                         "must share one tokenizer. Fix: a teacher of the student's model family.")
