"""The reference traces in traces/ reproduce: each recorded entry of traces/manifest.json runs again
with the same config and seeds, and its fresh trace must match the committed one.

Exactly equal: stages in the same order (per step), roles, the fields each stage added / removed /
changed / read, every field's storage, shape, dtype and device, the weight versions, the stage
extras that count things, the config fingerprint. Within the manifest's tolerance (rtol 1e-4, atol
1e-5): the masked summaries and the logged metrics. Why that tolerance: the same seed and one torch
thread give a bit-identical re-run on the same machine; another CPU may pick another SIMD kernel
for a matmul, which moves float32 results by ~1e-6 relative; a real change (another sampled token,
another loss) moves them by far more than 1e-4. An entry whose backend is missing here (`requires`:
ray, vllm, cuda) or that is not recorded yet (`pending`) is skipped with the reason.

When a change is meant to change the traces: `bash scripts/record_traces.sh [NAME ...]`, then commit
traces/ (the failure message says so).
"""
import pytest

from minirl.trace import read_trace
from minirl.trace.compare import compare_traces
from minirl.trace.reference import load_manifest, missing_requirements, reference_path
from minirl.trainer.record_traces import run_entry

pytestmark = pytest.mark.slow

MANIFEST = load_manifest()


@pytest.mark.parametrize("name", list(MANIFEST["traces"]))
def test_reference_trace_reproduces(name, tmp_path, request):
    entry = MANIFEST["traces"][name]
    missing = missing_requirements(entry)
    if missing:
        pytest.skip(f"{name}: this machine lacks {', '.join(missing)}")
    ref = reference_path(name)
    if not ref.exists():
        pytest.skip(f"{name}: not recorded yet ({entry.get('pending', 'run scripts/record_traces.sh ' + name)})")
    if "ray" in entry["requires"]:
        request.getfixturevalue("ray_session")  # the session's one Ray (a start costs 30-90 s here)
    reference = read_trace(ref)
    fresh = run_entry(entry, tmp_path / "run")
    tol = MANIFEST["tolerance"]
    diffs = compare_traces(reference, fresh, rtol=tol["rtol"], atol=tol["atol"])
    assert diffs == [], (f"the {name} run no longer reproduces traces/{name}/trace.jsonl ({len(diffs)} differences; "
                         f"if the change is intended: bash scripts/record_traces.sh {name}):\n" + "\n".join(diffs[:30]))
    # the run really trained: a policy update happened and the rollout got its weights
    updates = [e for e in fresh if e.get("stage") == "update_actor"]
    assert updates and all(e["extra"]["optimizer_steps"] >= 1 for e in updates)
    steps = [e["metrics"] for e in fresh if e.get("kind") == "metrics" and e["step"] >= 1]
    assert steps and all(m["actor/grad_norm"] > 0 for m in steps)
