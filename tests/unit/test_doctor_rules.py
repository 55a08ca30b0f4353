"""`minirl.doctor.register_check`: a rule of one's own joins `diagnose` (lab 08's reader writes three).

Fast: on the recorded clean trace `traces/grpo`, a registered rule's findings come after the built-in ones
(none there), registering a name again replaces the rule, `unregister_check` removes it.
"""

from __future__ import annotations

from minirl.doctor import (
    Evidence,
    Finding,
    diagnose,
    load_run,
    register_check,
    registered_checks,
    unregister_check,
)


def test_a_registered_rule_runs_in_diagnose_and_can_be_replaced_and_removed():
    rec = load_run("grpo")
    assert diagnose(rec) == []  # the recorded run is healthy

    @register_check
    def always(r):
        return [Finding("reward", "always", "a rule that always fires", "rollout", [1],
                        [Evidence("critic/score/max", r.metric("critic/score/max", 1), 1, "anything", "metrics")], [])]

    try:
        assert [f.check for f in diagnose(rec)] == ["always"] and "always" in registered_checks()
        register_check(lambda r: [], name="always")  # the same name again: replaced
        assert diagnose(rec) == []
    finally:
        unregister_check("always")
    assert "always" not in registered_checks()
