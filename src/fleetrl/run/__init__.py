"""The run layer: a training run from its config to its results.

- :mod:`~fleetrl.run.trainer`: the :class:`~fleetrl.run.trainer.Trainer` (one run: collect,
  learn, evaluate, checkpoint, log);
- :mod:`~fleetrl.run.evaluate`: evaluation episodes of a policy or a saved run;
- :mod:`~fleetrl.run.checkpoint`: checkpoints, exact resume's state;
- :mod:`~fleetrl.run.metrics`: the metrics rows and their reference;
- :mod:`~fleetrl.run.run_control`: the progress bar, signals and stopping;
- :mod:`~fleetrl.run.report`: ``fleetrl report``'s summary of a run;
- :mod:`~fleetrl.run.tracking`: MLflow and Weights & Biases;
- :mod:`~fleetrl.run.sweep`: sweeps on Ray Tune (``fleetrl tune``).

Nothing is imported here: ``fleetrl.Trainer`` and ``fleetrl.tune`` are the front doors.
"""
