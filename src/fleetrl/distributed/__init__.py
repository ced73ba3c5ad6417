"""The distributed runtime under every remote part: Ray's start, its backends, the wire.

- :mod:`~fleetrl.distributed.runtime`: starting Ray, a remote error, the cluster's resources;
- :mod:`~fleetrl.distributed.backends`: where workers run: Ray actors, or objects in this process;
- :mod:`~fleetrl.distributed.workers`: workers of one kind, their tasks in flight, their restarts;
- :mod:`~fleetrl.distributed.warm`: Ray's worker processes reused between runs;
- :mod:`~fleetrl.distributed.wire`: every format that crosses Ray, in one place;
- :mod:`~fleetrl.distributed.shm`: the shared-memory transport between processes on a node.

Importing this package loads nothing: ``import fleetrl.distributed.runtime`` loads neither
Ray nor torch.
"""
