"""Training engines: the part of a worker that runs forward, backward and optimizer steps.

Mirrors `verl/workers/engine/`. `BaseEngine` is the interface, `EngineRegistry` picks an engine by
`(model_type, backend, device)`, and the FSDP2 engine (`FSDPEngineWithLMHead` for actor/reference,
`FSDPEngineWithValueHead` for the critic) is the one implementation minirl ships; verl also has
Megatron, VeOmni, TorchTitan and Automodel engines behind the same interface.

Importing this package registers the FSDP engines:

```python
from minirl.workers.engine import EngineRegistry
engine = EngineRegistry.new("language_model", "fsdp", model_config, engine_config, optimizer_config)
```
"""

from minirl.workers.engine.base import BaseEngine, EngineRegistry
from minirl.workers.engine.fsdp_engine import FSDPEngine, FSDPEngineWithLMHead, FSDPEngineWithValueHead

__all__ = ["BaseEngine", "EngineRegistry", "FSDPEngine", "FSDPEngineWithLMHead", "FSDPEngineWithValueHead"]
