"""The engine-side half of top-k distillation (verl: `verl/trainer/distillation/fsdp/`)."""
