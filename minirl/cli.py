"""`minirl` on the command line: a thin face over `minirl.trainer`, `minirl.config` and `minirl.trace`.

    minirl train [key=value ...]          GRPO/PPO run (verl: python -m verl.trainer.main_ppo key=value ...)
    minirl sft [key=value ...]            SFT warm start on the same engine
    minirl train-rm [--out DIR ...]       a reward model trained on the policy's samples (reward.reward_model.*)
    minirl demo                           SFT warm start (cached) + a short GRPO run on the embedded task
    minirl config explain [key=value ...] the batch arithmetic of one training step
    minirl config show [key=value ...]    the composed config as YAML
    minirl doctor RUN                     which layer of a run broke, from its trace and metrics
    minirl doctor --env [key=value ...]   environment + resolved config for a bug report (verl: scripts/diagnose.py)
    minirl lab list | check NN            the labs; your copy of lab NN run headless, its scoreboard
"""

from __future__ import annotations

import argparse
import sys


def _config_cmd(args) -> int:
    from omegaconf import OmegaConf

    from minirl.config import ConfigError, explain, load

    try:
        cfg = load(args.overrides, check=(args.action == "explain"))
    except ConfigError as e:
        print(f"minirl config: {e}", file=sys.stderr)
        return 2
    if args.action == "explain":
        print(explain(cfg))
    else:
        print(OmegaConf.to_yaml(cfg))
    return 0


def _train_cmd(args) -> int:
    from minirl.trainer.main_ppo import main as train_main

    return train_main(args.overrides)


def _sft_cmd(args) -> int:
    from minirl.trainer.sft_trainer import main as sft_main

    return sft_main(args.overrides)


def _train_rm_cmd(args) -> int:
    from minirl.trainer.rm_trainer import run_args

    return run_args(vars(args))


def _demo_cmd(args) -> int:
    from minirl.trainer.demo import main as demo_main

    return demo_main(args.overrides)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl", description="minirl: verl rebuilt small, instrumented.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="run GRPO/PPO (verl's main_ppo) with key=value overrides")
    t.add_argument("overrides", nargs="*")
    t.set_defaults(fn=_train_cmd)
    s = sub.add_parser("sft", help="supervised fine-tuning warm start")
    s.add_argument("overrides", nargs="*")
    s.set_defaults(fn=_sft_cmd)
    from minirl.trainer.rm_trainer import add_arguments

    r = sub.add_parser("train-rm", help="train a reward model on the policy's samples (then reward.reward_model.*)")
    add_arguments(r)
    r.set_defaults(fn=_train_rm_cmd)
    d = sub.add_parser("demo", help="SFT warm start + GRPO on the embedded arithmetic task (CPU)")
    d.add_argument("overrides", nargs="*")
    d.set_defaults(fn=_demo_cmd)
    c = sub.add_parser("config", help="show or explain the composed config")
    c.add_argument("action", choices=["explain", "show"])
    c.add_argument("overrides", nargs="*")
    c.set_defaults(fn=_config_cmd)
    from minirl.anchors.cli import register_anchors_cli

    register_anchors_cli(sub)
    from minirl.trace.cli import register_trace_cli

    register_trace_cli(sub)
    from minirl.doctor.cli import register_doctor_cli

    register_doctor_cli(sub)
    from minirl.notebook.lab_cli import register_lab_cli

    register_lab_cli(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
