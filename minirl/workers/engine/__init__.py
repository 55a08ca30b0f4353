"""Training engines: the part of a worker that runs forward, backward and optimizer steps.

Mirrors `verl/workers/engine/`. `BaseEngine` is the interface, `EngineRegistry` picks an engine by
`(model_type, backend, device)`, and minirl ships two backends behind it:

- `fsdp` / `fsdp2`: the FSDP2 engine (`FSDPEngineWithLMHead` for actor/reference,
  `FSDPEngineWithValueHead` for the critic), every rank one data-parallel shard;
- `torchtitan`: tensor parallelism (DTensor) x FSDP2 on a 2-D `(dp_shard, tp)` mesh
  (`TorchTitanEngineWithLMHead`, `TorchTitanEngineWithValueHead`), selected by `model_engine=torchtitan`;
- `megatron`: Megatron's layout, tensor x pipeline x data parallelism with a 1F1B micro-batch schedule,
  on plain torch (`MegatronEngineWithLMHead`, `MegatronEngineWithValueHead`), selected by `model_engine=megatron`.

verl also has VeOmni and Automodel engines behind the same interface.
Importing this package registers the engines:

```python
from minirl.workers.engine import EngineRegistry
engine = EngineRegistry.new("language_model", "torchtitan", model_config, engine_config, optimizer_config)
```
"""

from minirl.workers.engine.base import BaseEngine, EngineRegistry
from minirl.workers.engine.fsdp_engine import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead
from minirl.workers.engine.megatron_engine import (
    MegatronEngine,
    MegatronEngineWithLMHead,
    MegatronEngineWithValueHead,
)
from minirl.workers.engine.torchtitan_engine import (
    TorchTitanEngine,
    TorchTitanEngineWithLMHead,
    TorchTitanEngineWithValueHead,
)

__all__ = ["BaseEngine", "EngineRegistry", "FSDPEngine", "FSDPEngineWithLMHead", "FSDPEngineWithValueHead",
           "MegatronEngine", "MegatronEngineWithLMHead", "MegatronEngineWithValueHead", "TorchTitanEngine",
           "TorchTitanEngineWithLMHead", "TorchTitanEngineWithValueHead"]
