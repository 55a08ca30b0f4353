"""Loss functions the workers hand to the engine (verl: `verl/workers/utils/`)."""
