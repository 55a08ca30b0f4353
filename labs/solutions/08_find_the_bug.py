"""Worked solutions of lab 08 (find the bug), kept out of the notebook.

Each `exercise_<n>(nb)` takes the notebook's namespace (its `globals()`: the parameters, `records`,
...) and returns the answer. The worked solution is what `minirl doctor` concludes from the same
trace and metrics the tables show (`minirl.doctor.diagnose`), so the answer is computed from the
evidence, never from the hidden fault's name. The first line of each docstring is printed next to
the answer when solutions are on. Try the exercise before you read its solution.
"""

from minirl.doctor import diagnose, layers_named


def _layer(nb, label):
    layers = layers_named(diagnose(nb["records"][label]))
    return layers[0] if len(layers) == 1 else layers


def exercise_1(nb):
    """minirl doctor on run A: the one layer its findings name (the first stage whose output is wrong)."""
    return _layer(nb, "A")


def exercise_2(nb):
    """minirl doctor on run B: the one layer its findings name."""
    return _layer(nb, "B")


def exercise_3(nb):
    """minirl doctor on run C: the one layer its findings name."""
    return _layer(nb, "C")


def exercise_4(nb):
    """The first step any of run A's findings cites (a skipped sync or a moved reference shows one step later)."""
    return min(s for f in diagnose(nb["records"]["A"]) for s in f.steps)
