"""Network code, below the algorithms and the collectors that use it.

- :mod:`~fleetrl.networks.kinds`: the kinds of network and distribution a section names;
- :mod:`~fleetrl.networks.models`: the default networks an algorithm builds from an env's spec;
- :mod:`~fleetrl.networks.heads`: the networks inside TensorDict modules, called on tensors;
- :mod:`~fleetrl.networks.policies`: what a user passes as a policy, made an acting module;
- :mod:`~fleetrl.networks.acting`: a probabilistic policy as one call on tensors;
- :mod:`~fleetrl.networks.sampling`: a draw and its log-probability without a distribution;
- :mod:`~fleetrl.networks.normalization`: observation and reward statistics, one per run.

Importing this package loads nothing (``fleetrl.networks.kinds`` needs no torch).
"""
