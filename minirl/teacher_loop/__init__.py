"""On-policy distillation's teacher: its servers (`teacher_model`) and the agent loop's client (`teacher_manager`).

verl: `verl/experimental/teacher_loop/`. The losses that read the teacher's log-probs are in
`minirl.trainer.distillation`.
"""

from minirl.teacher_loop.teacher_manager import AsyncTeacherLLMServerManager
from minirl.teacher_loop.teacher_model import (
    EMBEDDED_TEACHER,
    MultiTeacherModelManager,
    TeacherModelManager,
    resolve_teacher_models,
)

__all__ = ["EMBEDDED_TEACHER", "AsyncTeacherLLMServerManager", "MultiTeacherModelManager", "TeacherModelManager",
           "resolve_teacher_models"]
